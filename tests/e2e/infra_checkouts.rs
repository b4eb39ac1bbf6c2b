//! A second checkout on a machine whose ports another checkout's servers
//! hold: `infra/local/up.sh` fails at once naming the holder — its pid, its
//! data directory — and how to stop it, and stops nothing of the other's.
//! (Before: it tried to stop "a foreign postgres" as Debian's service,
//! then failed with PostgreSQL's bind error in a log file; for Redis it
//! shut the other checkout's server down.)

use seckill_e2e::{repo_root, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_checkout_names_who_holds_its_ports() {
    let other = std::env::temp_dir().join(format!("seckill-other-checkout-{:08x}", rand::random::<u32>()));
    let ours = repo_root().join(".data");
    for server in ["redis", "postgres", "kafka"] {
        let out = std::process::Command::new(repo_root().join("infra/local/up.sh"))
            .arg(server)
            .env("SECKILL_DATA", &other)
            .output()
            .expect("infra/local/up.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{server}: {stderr}");
        assert!(stderr.contains("is held by pid"), "{server}: {stderr}");
        assert!(stderr.contains(&ours.display().to_string()), "{server}: names the holder's data: {stderr}");
        assert!(stderr.contains("infra/local/down.sh"), "{server}: says how to stop it: {stderr}");
        assert!(!stderr.contains("starting"), "{server}: started nothing: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&other);
    // The other checkout's servers still serve.
    let env = TestEnv::new().await;
    let sale = env.sale();
    env.warmup(sale, 1).await;
    assert_eq!(env.redis_stock(sale).await, 1);
}
