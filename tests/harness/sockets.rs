//! What the kernel says of a TCP connection, read from `/proc/net/tcp`: a
//! test that hangs up on a server waits until the server has seen it.

use std::net::SocketAddr;

/// `/proc/net/tcp`'s states in which the local side has not closed yet:
/// ESTABLISHED and CLOSE_WAIT (the peer closed, this side did not).
const OPEN_STATES: [&str; 2] = ["01", "08"];

/// An IPv4 address and port as `/proc/net/tcp` writes them
/// (`0100007F:1F90`: the address's bytes in the host's order).
fn proc_form(addr: SocketAddr) -> Option<String> {
    let SocketAddr::V4(v4) = addr else { return None };
    let ip = u32::from_ne_bytes(v4.ip().octets());
    Some(format!("{ip:08X}:{:04X}", v4.port()))
}

/// Whether the server side of the connection `server` ↔ `client` is still
/// open: `false` once the server closed it (or it is gone), which after a
/// client hung up means the server noticed and let the connection go.
pub fn server_side_open(server: SocketAddr, client: SocketAddr) -> bool {
    let (Some(local), Some(remote)) = (proc_form(server), proc_form(client)) else {
        panic!("IPv4 loopback addresses only: {server}, {client}")
    };
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 3 && fields[1] == local && fields[2] == remote && OPEN_STATES.contains(&fields[3])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn an_address_is_written_as_the_kernel_writes_it() {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 8080));
        assert_eq!(proc_form(addr).unwrap(), "0100007F:1F90");
    }

    #[tokio::test]
    async fn a_connection_is_open_until_the_server_closes_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(server).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let local = client.local_addr().unwrap();
        assert!(server_side_open(server, local), "accepted and open");
        drop(client);
        assert!(server_side_open(server, local), "the client hung up; the server did not close yet");
        drop(accepted);
        assert!(!server_side_open(server, local), "closed by the server");
    }
}
