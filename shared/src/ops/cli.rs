//! The command line every service binary takes: `--help` (what the service
//! does and how it is configured), `--version` (with the git commit),
//! `--print-config` (the effective settings, secrets masked),
//! `--check-config` (the settings loaded and checked as at start, without
//! connecting to anything: the problems printed, exit 1); anything else
//! is a usage error (exit code 2), never a silent start.

use crate::config::{self, UnknownKeys};
use clap::{CommandFactory, FromArgMatches, Parser};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// `0.1.0 (commit 1a2b3c4d5e6f)`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SECKILL_GIT_COMMIT"), ")");

/// How every service is configured, for `--help`.
pub const CONFIGURATION_HELP: &str = "\
Configuration: built-in defaults (they work with infra/local/up.sh), then the
TOML file named by SECKILL_CONFIG, then environment variables:

  SECKILL_REDIS_URL        redis.url        redis://127.0.0.1:6379/0
  SECKILL_DATABASE_URL     database.url     postgres://seckill:seckill@127.0.0.1:5432/seckill
  SECKILL_KAFKA_BROKERS    kafka.brokers    127.0.0.1:9092
  SECKILL_TOPIC_PREFIX     kafka.topic_prefix (topics and consumer groups)
  SECKILL_KEY_PREFIX       redis.key_prefix
  SECKILL_HTTP_ADDR        http_addr        (edge) 127.0.0.1:8080
  SECKILL_ADMIN_ADDR       admin_addr       (edge) 127.0.0.1:9080 (operators' console)
  SECKILL_ADMIN_TOKEN      admin_token      (edge) admin API refused when unset
  SECKILL_USER_JWT_SECRET  user_jwt_secret  (edge) user JWT auth off when unset

Any other key as SECKILL__SECTION__KEY (e.g. SECKILL__REDIS__TIMEOUT_MS=2000).
Every key and its effective value: --print-config. docs/configuration.md
describes them. A key the service does not have is an
error naming it. RUST_LOG sets the log filter.";

/// The command line of a service binary.
#[derive(Debug, Parser)]
pub struct ServiceArgs {
    /// Print the effective settings (defaults, file, environment) as TOML,
    /// secrets masked, and exit.
    #[arg(long, conflicts_with = "check_config")]
    pub print_config: bool,
    /// Load and check the settings exactly as at start (without connecting
    /// to anything), print what is wrong, and exit: 0 when they would start,
    /// 1 otherwise.
    #[arg(long)]
    pub check_config: bool,
}

impl ServiceArgs {
    /// Parses the command line of `name`, which does what `about` says;
    /// `--help`, `--version` and usage errors exit here.
    pub fn parse_for(name: &'static str, about: &'static str) -> Self {
        let command = Self::command().name(name).about(about).version(VERSION).after_help(CONFIGURATION_HELP);
        let matches = command.get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
    }

    /// Loads the settings; with `--print-config` prints them and answers
    /// `None` (the caller exits 0). An invalid setting is an error naming it.
    pub fn settings<T: DeserializeOwned + Serialize + Default>(&self) -> anyhow::Result<Option<T>> {
        use anyhow::Context;
        let settings: T = config::load(UnknownKeys::Refuse).context("loading settings")?;
        if self.print_config {
            print!("{}", masked_toml(&settings)?);
            return Ok(None);
        }
        Ok(Some(settings))
    }
}

/// Settings as TOML, with the secrets masked: the admin token, the JWT
/// secret, and the password of every URL.
pub fn masked_toml<T: Serialize>(settings: &T) -> anyhow::Result<String> {
    let mut value = toml::Value::try_from(settings)?;
    mask(&mut value);
    Ok(toml::to_string_pretty(&value)?)
}

fn mask(value: &mut toml::Value) {
    let toml::Value::Table(table) = value else { return };
    for (key, value) in table.iter_mut() {
        match value {
            toml::Value::String(text) if crate::config::SECRET_KEYS.contains(&key.as_str()) => {
                *text = crate::config::Secret::MASK.into()
            }
            toml::Value::String(text) => {
                if let Some(masked) = crate::config::mask_url_password(text) {
                    *text = masked;
                }
            }
            toml::Value::Table(_) => mask(value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample {
        admin_token: Option<String>,
        database: Db,
    }

    #[derive(Serialize)]
    struct Db {
        url: String,
    }

    #[test]
    fn secrets_are_masked() {
        let sample = Sample {
            admin_token: Some("s3cret".into()),
            database: Db { url: "postgres://seckill:hunter2@db:5432/seckill".into() },
        };
        let text = masked_toml(&sample).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("hunter2"), "{text}");
        assert!(text.contains("postgres://seckill:********@db:5432/seckill"), "{text}");
        assert_eq!(crate::config::mask_url_password("redis://127.0.0.1:6379/0"), None, "no password, nothing masked");
        assert_eq!(crate::config::mask_url_password("redis://:pw@h:1/0").as_deref(), Some("redis://:********@h:1/0"));
    }
}
