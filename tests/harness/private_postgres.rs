//! A PostgreSQL server of one test's own, for what cannot be arranged on
//! the shared one: its transaction counter placed where the test needs it
//! (`pg_resetwal -x`), e.g. just below a change in the number of digits.
//! Transaction ids are the whole server's, so only a server of its own can
//! be moved without disturbing the tests beside it. Started in a temporary
//! folder on a free port; stopped and deleted when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running private server.
pub struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

/// The newest installed PostgreSQL's programs (the same packages
/// `infra/local/up.sh` installs).
fn pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL must be installed (infra/local/up.sh)")
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort_by_key(|bin| bin.parent().and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok()).unwrap_or(0));
    versions.pop().expect("an installed PostgreSQL with initdb")
}

/// Runs a PostgreSQL program as the `postgres` user when this process is
/// root (the server refuses to run as root), as itself otherwise.
fn run_as_postgres(program: &Path, args: &[&str]) {
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    let mut command = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let output = command.args(args).output().unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl PrivatePostgres {
    /// initdb, the next transaction id set to `next_xid`, started with
    /// `fsync` off (nothing here needs to survive a crash).
    pub fn start(next_xid: u32) -> Self {
        let bin = pg_bin();
        let dir = std::env::temp_dir().join(format!("seckill-pg-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let _ = Command::new("chown").arg("postgres").arg(&dir).status();
        let data = dir.join("data");
        let data_arg = data.to_str().expect("utf-8 path");
        run_as_postgres(&bin.join("initdb"), &["-D", data_arg, "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"]);
        run_as_postgres(&bin.join("pg_resetwal"), &["-x", &next_xid.to_string(), data_arg]);
        // The commit log must have the segment the new counter falls in
        // (each covers 2^20 transactions); the server extends it from there.
        let segment = data.join("pg_xact").join(format!("{:04X}", next_xid >> 20));
        if !segment.exists() {
            std::fs::write(&segment, vec![0u8; 256 * 1024]).expect("a commit log segment");
            let _ = Command::new("chown").arg("postgres").arg(&segment).status();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
        let options =
            format!("-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", dir.display());
        let log = dir.join("postgres.log");
        run_as_postgres(
            &bin.join("pg_ctl"),
            &["-D", data_arg, "-o", &options, "-l", log.to_str().expect("utf-8"), "-w", "start"],
        );
        Self { dir, bin, port }
    }

    /// The superuser's URL of its `postgres` database (no password).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        run_as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", data.to_str().unwrap_or_default(), "-m", "immediate", "stop"],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
