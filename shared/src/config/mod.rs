//! Typed settings: defaults that work with the local infra, an optional TOML
//! file (`SECKILL_CONFIG=path`) and environment overrides on top.
//!
//! The contract's variables (`SECKILL_REDIS_URL`, `SECKILL_DATABASE_URL`,
//! `SECKILL_KAFKA_BROKERS`, `SECKILL_HTTP_ADDR`, `SECKILL_ADMIN_TOKEN`,
//! `SECKILL_TOPIC_PREFIX`, `SECKILL_KEY_PREFIX`, `SECKILL_USER_JWT_SECRET`,
//! `SECKILL_OTLP_ENDPOINT`, …)
//! map to their keys; any other key is reachable as
//! `SECKILL__SECTION__KEY=value` (e.g. `SECKILL__ORDER__BATCH_SIZE=1000`).
//! Only `main` calls [`load`]; tests build settings in code.

mod secret;
mod servers;

pub(crate) use secret::{mask_url_password, SECRET_KEYS};
pub use secret::{masked_url, Secret};
pub use servers::*;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A list setting that also reads from one environment variable: a TOML
/// array, or a comma-separated string (`SECKILL__CORS__ALLOWED_ORIGINS=a,b`).
pub fn list_or_comma_separated<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Text(String),
    }
    Ok(match Either::deserialize(deserializer)? {
        Either::List(list) => list,
        Either::Text(text) => text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
    })
}

/// Environment variables of the contract, and the key each one sets. Their
/// values are always strings.
const CONTRACT_VARS: &[(&str, &[&str])] = &[
    ("SECKILL_REDIS_URL", &["redis", "url"]),
    ("SECKILL_KEY_PREFIX", &["redis", "key_prefix"]),
    ("SECKILL_DATABASE_URL", &["database", "url"]),
    ("SECKILL_KAFKA_BROKERS", &["kafka", "brokers"]),
    ("SECKILL_TOPIC_PREFIX", &["kafka", "topic_prefix"]),
    ("SECKILL_HTTP_ADDR", &["http_addr"]),
    ("SECKILL_ADMIN_ADDR", &["admin_addr"]),
    ("SECKILL_ADMIN_TOKEN", &["admin_token"]),
    ("SECKILL_USER_JWT_SECRET", &["user_jwt_secret"]),
    ("SECKILL_PAYMENT_WEBHOOK_SECRET", &["payment_webhook_secret"]),
    ("SECKILL_USER_JWKS", &["user_jwks"]),
    ("SECKILL_USER_JWT_AUDIENCE", &["user_jwt_audience"]),
    ("SECKILL_USER_JWT_ISSUER", &["user_jwt_issuer"]),
    ("SECKILL_OTLP_ENDPOINT", &["telemetry", "otlp_endpoint"]),
];

/// Whether a key the settings do not have is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownKeys {
    /// A service: a misspelt key must not be silently ignored.
    Refuse,
    /// The operator's tool, which shares its environment with every service
    /// and reads only the servers' parts of it.
    Ignore,
}

/// Loads settings: defaults, then the TOML file named by `SECKILL_CONFIG`,
/// then environment overrides. A bad key or value fails naming it.
pub fn load<T: DeserializeOwned + Serialize + Default>(unknown: UnknownKeys) -> anyhow::Result<T> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    load_from(std::env::var("SECKILL_CONFIG").ok().as_deref(), &vars, unknown)
}

/// [`load`] with the file and the environment given, for tests.
pub fn load_from<T: DeserializeOwned + Serialize + Default>(
    file: Option<&str>,
    vars: &[(String, String)],
    unknown: UnknownKeys,
) -> anyhow::Result<T> {
    let mut table = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading SECKILL_CONFIG file {path}"))?;
            text.parse::<toml::Table>().with_context(|| format!("parsing {path}"))?
        }
        None => toml::Table::new(),
    };
    // Contract variables are shared by every service in an environment; a
    // service whose settings have no such section or key (the order service
    // has no admin token) ignores it, while a file or SECKILL__ key it lacks
    // still fails. The settings' own defaults say which keys exist.
    let schema = serde_json::to_value(T::default()).context("describing the settings")?;
    if unknown == UnknownKeys::Refuse {
        refuse_misspelt_vars(vars, &schema)?;
    }
    for (name, value) in vars {
        if let Some((_, path)) = CONTRACT_VARS.iter().find(|(var, _)| var == name) {
            let known = path.iter().try_fold(&schema, |node, part| node.get(part)).is_some();
            if known {
                set_path(&mut table, path, toml::Value::String(value.clone()), name)?;
            }
        } else if let Some(rest) = name.strip_prefix("SECKILL__") {
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                bail!("environment variable {name}: empty key segment");
            }
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            // A secret is text whatever it looks like: read as a number, it
            // would be refused in a message that shows it.
            let secret = path.last().is_some_and(|key| SECRET_KEYS.contains(key));
            let value = if secret { toml::Value::String(value.clone()) } else { infer_value(value) };
            set_path(&mut table, &path, value, name)?;
        }
    }
    match unknown {
        UnknownKeys::Refuse => refuse_unknown_keys(&table, &schema, "")?,
        UnknownKeys::Ignore => drop_unknown_keys(&mut table, &schema),
    }
    // What is given goes over the settings' own defaults, key by key: a
    // service's defaults for the parts it flattens in (its metrics port, its
    // pool size) hold, which serde's per-struct defaults would not do.
    let mut settings = toml::Value::try_from(T::default()).context("describing the settings")?;
    overlay(&mut settings, toml::Value::Table(table));
    T::deserialize(settings).map_err(|e| anyhow::anyhow!("invalid settings: {e}"))
}

/// Fails on a `SECKILL_` variable that is neither the contract's nor a
/// `SECKILL__` key but would be silently ignored though it plainly meant a
/// setting: a setting spelt with single underscores
/// (`SECKILL_USER_JWT_LEEWAY_SECS`), or a contract variable nearly spelt
/// (`SECKILL_REDIS_ULR`). The message names the variable meant. Others under
/// the prefix (`SECKILL_CONFIG`, the tools' own, Kubernetes' service links
/// such as `SECKILL_EDGE_SERVICE_HOST`) are left alone.
fn refuse_misspelt_vars(vars: &[(String, String)], schema: &serde_json::Value) -> anyhow::Result<()> {
    let mut settings = Vec::new();
    setting_paths(schema, &mut Vec::new(), &mut settings);
    for (name, _) in vars {
        let Some(rest) = name.strip_prefix("SECKILL_") else { continue };
        if rest.starts_with('_') || CONTRACT_VARS.iter().any(|(var, _)| var == name) {
            continue;
        }
        if let Some(path) = settings.iter().find(|path| path.join("_").eq_ignore_ascii_case(rest)) {
            let contract = CONTRACT_VARS.iter().find(|(_, keys)| keys.iter().eq(path.iter()));
            let meant = match contract {
                Some((var, _)) => (*var).to_owned(),
                None => format!("SECKILL__{}", path.join("__").to_ascii_uppercase()),
            };
            bail!("environment variable {name} names no setting; {meant} sets {}", path.join("."));
        }
        if let Some((var, _)) = CONTRACT_VARS.iter().find(|(var, _)| strsim::levenshtein(var, name) <= 2) {
            bail!("environment variable {name} names no setting; did you mean {var}?");
        }
    }
    Ok(())
}

/// The path of every setting in `schema` (the defaults, serialized).
fn setting_paths(schema: &serde_json::Value, path: &mut Vec<String>, paths: &mut Vec<Vec<String>>) {
    match schema.as_object() {
        Some(fields) => {
            for (key, value) in fields {
                path.push(key.clone());
                setting_paths(value, path, paths);
                path.pop();
            }
        }
        None => paths.push(path.clone()),
    }
}

/// Puts `given` over `base`: tables merge key by key, anything else replaces.
fn overlay(base: &mut toml::Value, given: toml::Value) {
    match (base, given) {
        (toml::Value::Table(base), toml::Value::Table(given)) => {
            for (key, value) in given {
                match base.get_mut(&key) {
                    Some(existing) => overlay(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, given) => *base = given,
    }
}

/// Removes the keys of `table` the settings do not have.
fn drop_unknown_keys(table: &mut toml::Table, schema: &serde_json::Value) {
    let Some(known) = schema.as_object() else { return };
    table.retain(|key, _| known.contains_key(key));
    for (key, value) in table.iter_mut() {
        if let toml::Value::Table(inner) = value {
            drop_unknown_keys(inner, &known[key]);
        }
    }
}

/// Fails naming the first key of `table` that the settings do not have
/// (`schema`: the defaults, serialized). Settings structs flatten shared
/// parts, which serde's `deny_unknown_fields` cannot check, so the check is
/// made here, once, for every service.
fn refuse_unknown_keys(table: &toml::Table, schema: &serde_json::Value, path: &str) -> anyhow::Result<()> {
    let Some(known) = schema.as_object() else { return Ok(()) };
    for (key, value) in table {
        let name = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        let Some(expected) = known.get(key) else { bail!("unknown setting '{name}'") };
        if let toml::Value::Table(inner) = value {
            refuse_unknown_keys(inner, expected, &name)?;
        }
    }
    Ok(())
}

fn infer_value(raw: &str) -> toml::Value {
    if let Ok(n) = raw.parse::<i64>() {
        return toml::Value::Integer(n);
    }
    if let Ok(b) = raw.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    if let Ok(f) = raw.parse::<f64>() {
        return toml::Value::Float(f);
    }
    toml::Value::String(raw.to_owned())
}

fn set_path(table: &mut toml::Table, path: &[&str], value: toml::Value, var: &str) -> anyhow::Result<()> {
    let (last, parents) = path.split_last().expect("paths are never empty");
    let mut current = table;
    for part in parents {
        let entry = current.entry((*part).to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = match entry {
            toml::Value::Table(t) => t,
            _ => bail!("environment variable {var}: '{part}' is not a section"),
        };
    }
    current.insert((*last).to_owned(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct Sample {
        http_addr: String,
        admin_token: Option<String>,
        redis: RedisSettings,
        kafka: KafkaSettings,
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn contract_variables_set_their_keys_as_strings() {
        let s: Sample = load_from(
            None,
            &vars(&[
                ("SECKILL_ADMIN_TOKEN", "12345"),
                ("SECKILL_KEY_PREFIX", "t1:"),
                ("SECKILL_HTTP_ADDR", "0.0.0.0:1"),
            ]),
            UnknownKeys::Refuse,
        )
        .unwrap();
        assert_eq!(s.admin_token.as_deref(), Some("12345"), "a numeric-looking token stays a string");
        assert_eq!(s.redis.key_prefix, "t1:");
        assert_eq!(s.http_addr, "0.0.0.0:1");
        assert_eq!(s.kafka.brokers, "127.0.0.1:9092", "untouched keys keep their defaults");
    }

    #[derive(Debug, Serialize, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct NoHttp {
        redis: RedisSettings,
    }

    #[test]
    fn contract_variables_a_service_lacks_are_ignored() {
        let s: NoHttp = load_from(
            None,
            &vars(&[("SECKILL_ADMIN_TOKEN", "x"), ("SECKILL_HTTP_ADDR", "y"), ("SECKILL_KEY_PREFIX", "p:")]),
            UnknownKeys::Refuse,
        )
        .unwrap();
        assert_eq!(s.redis.key_prefix, "p:");
    }

    #[test]
    fn nested_overrides_are_typed() {
        let s: Sample =
            load_from(None, &vars(&[("SECKILL__KAFKA__ORDER_PARTITIONS", "3")]), UnknownKeys::Refuse).unwrap();
        assert_eq!(s.kafka.order_partitions, 3);
    }

    #[test]
    fn unknown_keys_in_a_file_are_named() {
        let dir = std::env::temp_dir().join(format!("seckill-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[kafka]\nbrokers = \"b:1\"\nlinger = 3\n").unwrap();
        let err = load_from::<Sample>(path.to_str(), &[], UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("kafka.linger"), "{err}");
        std::fs::write(&path, "typo_addr = \"x\"\n").unwrap();
        let err = load_from::<Sample>(path.to_str(), &[], UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("typo_addr"), "{err}");
    }

    #[test]
    fn a_setting_spelt_with_single_underscores_is_refused_naming_its_variable() {
        let err = load_from::<Sample>(None, &vars(&[("SECKILL_KAFKA_ORDER_PARTITIONS", "3")]), UnknownKeys::Refuse)
            .unwrap_err()
            .to_string();
        assert!(err.contains("SECKILL__KAFKA__ORDER_PARTITIONS sets kafka.order_partitions"), "{err}");
        let err = load_from::<Sample>(None, &vars(&[("SECKILL_REDIS_ULR", "redis://x")]), UnknownKeys::Refuse)
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean SECKILL_REDIS_URL"), "{err}");
        // What names no setting and spells none is not the services' own.
        let others = [("SECKILL_EDGE_SERVICE_HOST", "10.0.0.1"), ("SECKILL_DATA", "/d"), ("SECKILL_CONFIG", "")];
        load_from::<Sample>(None, &vars(&others), UnknownKeys::Refuse).unwrap();
        // The operator's tool shares every service's environment.
        load_from::<Sample>(None, &vars(&[("SECKILL_KAFKA_ORDER_PARTITIONS", "3")]), UnknownKeys::Ignore).unwrap();
    }

    #[test]
    fn a_bad_key_is_named() {
        let err =
            load_from::<Sample>(None, &vars(&[("SECKILL__KAFKA__NO_SUCH_KEY", "1")]), UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("no_such_key"), "{err}");
        let err =
            load_from::<Sample>(None, &vars(&[("SECKILL__KAFKA__ORDER_PARTITIONS", "many")]), UnknownKeys::Refuse)
                .unwrap_err();
        assert!(err.to_string().contains("order_partitions") || err.to_string().contains("invalid type"), "{err}");
    }
}
