//! Who the client of a request is, for everything that counts per client:
//! the admin throttle, the per-client order limit and the status reads'
//! limit. It is the TCP peer, unless the peer is one of
//! `auth.trusted_proxies` (CIDRs): then it is the right-most hop of the
//! proxies' header (`auth.client_address_header`: `X-Forwarded-For`, or
//! RFC 7239's `Forwarded`) that is not itself a trusted proxy. From anyone
//! else the header is ignored, so a client cannot name its own address.
//!
//! Only one of the two headers is read, the one the proxies write: a proxy
//! that appends `X-Forwarded-For` passes a client's own `Forwarded` on
//! untouched, and believing that one would let the client choose its key.

use ipnet::IpNet;
use std::net::IpAddr;

/// The client's address, as [`TrustedProxies::client`] found it: a
/// request extension set where connections are served ([`crate::serve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// Whether the request's TCP peer is one of `auth.trusted_proxies`: a
/// request extension set beside [`ClientAddr`]. Only then is a
/// `traceparent`'s sampled flag taken (a proxy of the shop's decided it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FromTrustedProxy(pub bool);

/// Which header the trusted proxies name the client in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (HAProxy's `option
    /// forwardfor`, nginx, most ingresses).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client;proto=https, for=proxy1` (RFC 7239).
    Forwarded,
}

/// The proxies whose word about the client is taken.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    header: ForwardedHeader,
}

impl TrustedProxies {
    /// From `auth.trusted_proxies`: CIDRs, or plain addresses (one host).
    pub fn parse(list: &[String], header: ForwardedHeader) -> anyhow::Result<Self> {
        let networks = list
            .iter()
            .map(|entry| {
                entry.parse::<IpNet>().or_else(|_| entry.parse::<IpAddr>().map(IpNet::from)).map_err(|_| {
                    anyhow::anyhow!("auth.trusted_proxies: '{entry}' is not an IP address or a CIDR (10.0.0.0/8)")
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { networks, header })
    }

    /// Whether `address` is a trusted proxy's.
    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.networks.iter().any(|network| network.contains(&address))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &axum::http::HeaderMap) -> IpAddr {
        if self.networks.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let name = match self.header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        };
        // Every line of the header, in order, as one list of hops.
        let lines: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
        let hops = lines.iter().flat_map(|line| line.split(','));
        let mut client = peer;
        for hop in hops.rev() {
            let address = match self.header {
                ForwardedHeader::XForwardedFor => parse_hop(hop),
                ForwardedHeader::Forwarded => forwarded_for(hop).and_then(parse_hop),
            };
            // A hop no address can be read from (`unknown`, an obfuscated
            // name, garbage): the last proxy that named one is as far as
            // the chain can be believed.
            let Some(address) = address else { return client };
            client = address;
            if !self.trusts(address) {
                return address;
            }
        }
        client
    }
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.1`) is that IPv4
/// address: a dual-stack listener sees IPv4 peers so.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// The `for=` value of one element of a `Forwarded` header.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        key.trim().eq_ignore_ascii_case("for").then(|| value.trim().trim_matches('"'))
    })
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(address) = hop.parse::<IpAddr>() {
        return Some(canonical(address));
    }
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse::<IpAddr>().ok().map(canonical);
    }
    let (host, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &str, lines: &[&str]) -> axum::http::HeaderMap {
        let mut headers = axum::http::HeaderMap::new();
        for line in lines {
            headers.append(axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(), line.parse().unwrap());
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_right_most_untrusted_hop_of_a_trusted_proxy_is_the_client() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.7".into()], ForwardedHeader::default())
            .expect("CIDRs and plain addresses");
        for (peer, lines, client, why) in [
            ("10.1.2.3", &["203.0.113.9"][..], "203.0.113.9", "one proxy"),
            ("10.1.2.3", &["198.51.100.1, 203.0.113.9, 10.4.4.4"], "203.0.113.9", "trusted hops skipped"),
            ("10.1.2.3", &["198.51.100.1", "203.0.113.9"], "203.0.113.9", "two header lines are one list"),
            ("10.1.2.3", &["203.0.113.9:4711"], "203.0.113.9", "a port"),
            ("10.1.2.3", &["[2001:db8::5]:443"], "2001:db8::5", "IPv6 with a port"),
            ("10.1.2.3", &["::ffff:203.0.113.9"], "203.0.113.9", "IPv4 written as IPv6"),
            ("10.1.2.3", &["10.9.9.9, 192.0.2.7"], "10.9.9.9", "every hop trusted: the left-most"),
            ("10.1.2.3", &["evil, 203.0.113.9"], "203.0.113.9", "garbage beyond the client is never read"),
            ("10.1.2.3", &["203.0.113.9, unknown"], "10.1.2.3", "an unreadable last hop: the proxy"),
            ("10.1.2.3", &[], "10.1.2.3", "no header: the proxy"),
            ("203.0.113.50", &["198.51.100.1"], "203.0.113.50", "an untrusted peer's header is ignored"),
            ("::ffff:10.1.2.3", &["203.0.113.9"], "203.0.113.9", "a trusted peer written as IPv6"),
        ] {
            assert_eq!(proxies.client(ip(peer), &headers("x-forwarded-for", lines)), ip(client), "{why}");
        }
        assert_eq!(proxies.client(ip("10.1.2.3"), &headers("forwarded", &["for=203.0.113.9"])), ip("10.1.2.3"));
    }

    #[test]
    fn the_forwarded_header_is_read_when_configured_and_only_then() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into()], ForwardedHeader::Forwarded).unwrap();
        let peer = ip("10.1.2.3");
        for (lines, client, why) in [
            (&["for=203.0.113.9;proto=https"][..], "203.0.113.9", "one element"),
            (&[r#"for="[2001:db8::5]:4711", for=10.2.2.2"#], "2001:db8::5", "quoted IPv6, a trusted hop"),
            (&["proto=https;For=198.51.100.3;by=10.0.0.1"], "198.51.100.3", "any order, any case"),
            (&["for=_hidden"], "10.1.2.3", "an obfuscated name"),
        ] {
            assert_eq!(proxies.client(peer, &headers("forwarded", lines)), ip(client), "{why}");
        }
        assert_eq!(proxies.client(peer, &headers("x-forwarded-for", &["203.0.113.9"])), peer, "the other header");
    }

    #[test]
    fn a_list_entry_that_is_no_address_or_network_is_refused() {
        for bad in ["10.0.0.300", "10.0.0.0/33", "proxy.internal", ""] {
            let error = TrustedProxies::parse(&[bad.into()], ForwardedHeader::default()).unwrap_err();
            assert!(error.to_string().contains("auth.trusted_proxies"), "{bad}: {error}");
        }
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("10.1.2.3"), &headers("x-forwarded-for", &["203.0.113.9"])), ip("10.1.2.3"));
    }
}
