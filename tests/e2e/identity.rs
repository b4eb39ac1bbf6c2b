//! User identity from the shop's identity provider: tokens verified against
//! its public keys (a JWKS file: RS256, ES256), with the audience, issuer
//! and not-before checked and the algorithm taken from the key; or the user
//! id from the shop's API gateway, believed only from its addresses.

use hyper::Method;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use seckill_e2e::http::Client;
use seckill_e2e::TestEnv;
use std::path::Path;
use std::process::Command;

/// A private key made by openssl, as DER (`args`: the key's kind).
fn openssl_key(dir: &Path, name: &str, generate: &[&str], to_der: &[&str]) -> Vec<u8> {
    let pem = dir.join(format!("{name}.pem"));
    let der = dir.join(format!("{name}.der"));
    let ok = Command::new("openssl").args(generate).arg("-out").arg(&pem).status().expect("openssl").success();
    assert!(ok, "openssl {generate:?}");
    let ok = Command::new("openssl")
        .args(to_der)
        .arg("-in")
        .arg(&pem)
        .arg("-out")
        .arg(&der)
        .status()
        .expect("openssl")
        .success();
    assert!(ok, "openssl {to_der:?}");
    std::fs::read(der).expect("the key")
}

struct Provider {
    rsa: EncodingKey,
    ec: EncodingKey,
    /// The RSA public key's modulus, as an attacker would use it for HS256.
    rsa_public: Vec<u8>,
    jwks: String,
}

fn provider(dir: &Path) -> Provider {
    let rsa_der = openssl_key(
        dir,
        "rsa",
        &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        &["rsa", "-traditional", "-outform", "DER"],
    );
    let ec_der = openssl_key(
        dir,
        "ec",
        &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        &["pkcs8", "-topk8", "-nocrypt", "-outform", "DER"],
    );
    let rsa = EncodingKey::from_rsa_der(&rsa_der);
    let ec = EncodingKey::from_ec_der(&ec_der);
    let mut rsa_jwk = Jwk::from_encoding_key(&rsa, Algorithm::RS256).expect("an RSA JWK");
    rsa_jwk.common.key_id = Some("rsa-1".into());
    let mut ec_jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).expect("an EC JWK");
    ec_jwk.common.key_id = Some("ec-1".into());
    let jwks = serde_json::to_string(&JwkSet { keys: vec![rsa_jwk.clone(), ec_jwk] }).unwrap();
    let rsa_public = match &rsa_jwk.algorithm {
        jsonwebtoken::jwk::AlgorithmParameters::RSA(params) => params.n.clone().into_bytes(),
        _ => unreachable!(),
    };
    Provider { rsa, ec, rsa_public, jwks }
}

fn token(key: &EncodingKey, alg: Algorithm, kid: &str, claims: serde_json::Value) -> String {
    let header = Header { kid: Some(kid.into()), ..Header::new(alg) };
    format!("Bearer {}", jsonwebtoken::encode(&header, &claims, key).expect("a token"))
}

fn claims(user: i64, aud: &str, iss: &str) -> serde_json::Value {
    let now = chrono::Utc::now().timestamp();
    serde_json::json!({ "sub": user.to_string(), "aud": aud, "iss": iss, "exp": now + 600, "iat": now })
}

async fn order_as(client: &Client, sale: seckill_shared::domain::SaleKey, user: i64, auth: &str) -> (u16, String) {
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    let reply =
        client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[("authorization", auth)]).await;
    (reply.status.as_u16(), reply.text)
}

/// Tokens of the provider's RSA and EC keys with the right audience and
/// issuer place orders; a wrong audience or issuer, a token not valid yet,
/// an HS256 token made with the RSA key's public part, an unknown key, and
/// a token of another key than its header names are all refused with 401
/// `invalid token` — and nothing is deducted. (Before: only an HS256 secret
/// could be configured, with no audience or issuer checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_the_providers_keys_are_verified_with_audience_issuer_and_the_keys_algorithm() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let dir = std::env::temp_dir().join(format!("seckill-jwks-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let provider = provider(&dir);
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, &provider.jwks).unwrap();
    let mut settings = env.edge_settings();
    settings.auth.allow_anonymous = false;
    settings.user_jwks = Some(jwks.display().to_string());
    settings.user_jwt_audience = Some("shop".into());
    settings.user_jwt_issuer = Some("https://id.shop.example".into());
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let (aud, iss) = ("shop", "https://id.shop.example");

    let rs = token(&provider.rsa, Algorithm::RS256, "rsa-1", claims(1, aud, iss));
    assert_eq!(order_as(&client, sale, 1, &rs).await.0, 202, "an RS256 token of the provider");
    let es = token(&provider.ec, Algorithm::ES256, "ec-1", claims(2, aud, iss));
    assert_eq!(order_as(&client, sale, 2, &es).await.0, 202, "an ES256 token of the provider");
    assert_eq!(order_as(&client, sale, 3, &rs).await.0, 403, "the token is user 1's");

    let mut early = claims(4, aud, iss);
    early["nbf"] = serde_json::json!(chrono::Utc::now().timestamp() + 3_600);
    let hs_with_public_key = {
        let header = Header { kid: Some("rsa-1".into()), ..Header::new(Algorithm::HS256) };
        let key = EncodingKey::from_secret(&provider.rsa_public).unwrap();
        format!("Bearer {}", jsonwebtoken::encode(&header, &claims(4, aud, iss), &key).unwrap())
    };
    for (auth, why) in [
        (token(&provider.rsa, Algorithm::RS256, "rsa-1", claims(4, "another-shop", iss)), "a wrong audience"),
        (token(&provider.rsa, Algorithm::RS256, "rsa-1", claims(4, aud, "https://evil.example")), "a wrong issuer"),
        (token(&provider.rsa, Algorithm::RS256, "rsa-1", early), "not valid before an hour from now"),
        (hs_with_public_key, "HS256 against the RSA key"),
        (token(&provider.rsa, Algorithm::RS256, "ec-1", claims(4, aud, iss)), "signed by another key than named"),
        (token(&provider.rsa, Algorithm::RS256, "nobody", claims(4, aud, iss)), "an unknown key"),
        ("Bearer not-a-token".to_owned(), "not a JWT"),
    ] {
        let (status, text) = order_as(&client, sale, 4, &auth).await;
        assert_eq!(status, 401, "{why}: {text}");
        assert!(text.contains("invalid token") && !text.to_lowercase().contains("signature"), "{why}: {text}");
    }
    let body = format!(r#"{{"activityId":{},"skuId":{},"userId":4}}"#, sale.activity, sale.sku);
    let none = client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &[]).await;
    assert_eq!(none.status, 401, "no token");
    assert_eq!(env.redis_stock(sale).await, 8, "only the two good tokens deducted");
    edge.stop().await;
    std::fs::remove_dir_all(dir).ok();
}

/// Gateway mode: the user id comes from the gateway's header, believed only
/// from a trusted address; the same header from anyone else is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_user_header_is_believed_from_its_addresses_only() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let body = |user: i64| format!(r#"{{"activityId":{},"skuId":{},"userId":{user}}}"#, sale.activity, sale.sku);
    let send = |client: Client, user: i64, header: Option<&'static str>| {
        let body = body(user);
        async move {
            let headers: Vec<(&str, &str)> = header.map(|h| ("x-user-id", h)).into_iter().collect();
            client.send(Method::POST, "/api/seckill/order", Some(body.as_bytes()), &headers).await.status.as_u16()
        }
    };
    for (trusted, expect_seven, expect_other, why) in
        [("127.0.0.1", 202, 403, "from the gateway"), ("10.9.8.7", 401, 401, "from an untrusted address")]
    {
        let mut settings = env.edge_settings();
        settings.auth.allow_anonymous = false;
        settings.auth.gateway_user_header = Some("X-User-Id".into());
        settings.auth.trusted_proxies = vec![trusted.into()];
        let edge = env.spawn_edge(settings).await;
        let client = Client::new(edge.url());
        assert_eq!(send(client.clone(), 7, Some("7")).await, expect_seven, "{why}: the header's user");
        assert_eq!(send(client.clone(), 8, Some("9")).await, expect_other, "{why}: another user than the header's");
        assert_eq!(send(client.clone(), 10, None).await, 401, "{why}: no header");
        edge.stop().await;
    }
    assert_eq!(env.redis_stock(sale).await, 9, "one order, from the gateway");
}

/// A certificate authority and a server certificate for 127.0.0.1 (PEM
/// files in `dir`), made by openssl.
fn tls_files(dir: &Path) {
    let run = |args: &[&str]| {
        let ok = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl").status.success();
        assert!(ok, "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
}

/// An https server on 127.0.0.1 answering every GET with `body`'s current
/// value; its port.
async fn jwks_server(dir: &Path, body: std::sync::Arc<std::sync::Mutex<String>>) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let certs: Vec<_> = CertificateDer::pem_file_iter(dir.join("server.pem")).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = body.lock().unwrap().clone();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

/// The provider's JWKS fetched over https (a private CA trusted by
/// `user_jwks_ca_file`), and fetched again: a key the provider rotated in is
/// accepted and the one it dropped refused, without a restart. An edge that
/// cannot verify the server's certificate loads no key: not ready, and
/// every token refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_fetched_over_https_rotate_without_a_restart() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let dir = std::env::temp_dir().join(format!("seckill-jwks-tls-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let provider = provider(&dir);
    tls_files(&dir);
    let sets: serde_json::Value = serde_json::from_str(&provider.jwks).unwrap();
    let only = |kid: &str| {
        let keys: Vec<_> = sets["keys"].as_array().unwrap().iter().filter(|k| k["kid"] == kid).cloned().collect();
        serde_json::json!({ "keys": keys }).to_string()
    };
    let served = std::sync::Arc::new(std::sync::Mutex::new(only("rsa-1")));
    let port = jwks_server(&dir, served.clone()).await;
    let mut settings = env.edge_settings();
    settings.auth.allow_anonymous = false;
    settings.user_jwks = Some(format!("https://127.0.0.1:{port}/.well-known/jwks.json"));
    settings.user_jwks_refresh_secs = 1;
    let mut untrusting = settings.clone();
    settings.user_jwks_ca_file = Some(dir.join("ca.pem").display().to_string());
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let rs = |user| token(&provider.rsa, Algorithm::RS256, "rsa-1", claims(user, "any", "any"));
    let es = |user| token(&provider.ec, Algorithm::ES256, "ec-1", claims(user, "any", "any"));
    // Ready once the keys are fetched.
    seckill_e2e::wait_ready(&client).await;
    assert_eq!(order_as(&client, sale, 1, &rs(1)).await.0, 202, "the served RSA key");
    assert_eq!(order_as(&client, sale, 2, &es(2)).await.0, 401, "the EC key is not served yet");

    *served.lock().unwrap() = only("ec-1");
    seckill_e2e::eventually("the rotated key accepted", std::time::Duration::from_secs(30), || async {
        match order_as(&client, sale, 2, &es(2)).await {
            (202, _) => Ok(()),
            (status, text) => Err(format!("{status} {text}")),
        }
    })
    .await;
    assert_eq!(order_as(&client, sale, 3, &rs(3)).await.0, 401, "the dropped key is refused");

    untrusting.user_jwks_ca_file = None;
    let blind = env.spawn_edge(untrusting).await;
    let blind_client = Client::new(blind.url());
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let ready = blind_client.get("/readyz").await;
    assert_eq!((ready.status.as_u16(), ready.text.as_str()), (503, "user keys not loaded"));
    assert_eq!(order_as(&blind_client, sale, 4, &es(4)).await.0, 401, "no key loaded: no token accepted");
    assert_eq!(env.redis_stock(sale).await, 8);
    blind.stop().await;
    edge.stop().await;
    std::fs::remove_dir_all(dir).ok();
}

/// With an audience and an issuer configured, a token that carries neither
/// (a token of the same provider for another application) is refused like
/// a wrong one, and so is one without `sub` or past its `exp` by more than
/// the clock leeway; one expired within the leeway (30 s by default) is
/// accepted. Nothing is deducted by a refused token. (Before: a token
/// without `aud` or `iss` bought as the user it named.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_the_configured_audience_or_issuer_buys_nothing() {
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 10).await;
    let dir = std::env::temp_dir().join(format!("seckill-jwks-aud-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let provider = provider(&dir);
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, &provider.jwks).unwrap();
    let mut settings = env.edge_settings();
    settings.auth.allow_anonymous = false;
    settings.user_jwks = Some(jwks.display().to_string());
    settings.user_jwt_audience = Some("shop".into());
    settings.user_jwt_issuer = Some("https://id.shop.example".into());
    let edge = env.spawn_edge(settings).await;
    let client = Client::new(edge.url());
    let (aud, iss) = ("shop", "https://id.shop.example");
    let signed = |claims| token(&provider.rsa, Algorithm::RS256, "rsa-1", claims);
    let without = |user: i64, claim: &str| {
        let mut claims = claims(user, aud, iss);
        claims.as_object_mut().unwrap().remove(claim);
        claims
    };
    let expired = |user: i64, seconds_ago: i64| {
        let mut claims = claims(user, aud, iss);
        claims["exp"] = serde_json::json!(chrono::Utc::now().timestamp() - seconds_ago);
        claims
    };
    for (claims, why) in [
        (without(5, "aud"), "no aud"),
        (without(5, "iss"), "no iss"),
        (without(5, "sub"), "no sub"),
        (without(5, "exp"), "no exp"),
        (expired(5, 120), "expired two minutes ago"),
    ] {
        let (status, text) = order_as(&client, sale, 5, &signed(claims)).await;
        assert_eq!(status, 401, "{why}: {text}");
        assert!(text.contains("UNAUTHORIZED") && text.contains("invalid token"), "{why}: {text}");
    }
    assert_eq!(env.redis_stock(sale).await, 10, "no refused token deducted");
    assert_eq!(order_as(&client, sale, 6, &signed(expired(6, 10))).await.0, 202, "expired within the leeway");
    assert_eq!(env.redis_stock(sale).await, 9);
    edge.stop().await;
    std::fs::remove_dir_all(dir).ok();
}
