//! Stamps the git commit the binaries are built from into `shared`
//! (`SECKILL_GIT_COMMIT`, for `--version`): taken from the environment when
//! set (a container build without `.git`), else from git, else "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SECKILL_GIT_COMMIT");
    let git_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.git");
    // A new commit moves HEAD or the branch it names.
    for watched in ["HEAD", "refs/heads", "packed-refs"] {
        if git_dir.join(watched).exists() {
            println!("cargo:rerun-if-changed={}", git_dir.join(watched).display());
        }
    }
    let commit = std::env::var("SECKILL_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let output = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    });
    println!("cargo:rustc-env=SECKILL_GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
