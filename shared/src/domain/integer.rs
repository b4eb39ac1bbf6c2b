//! Integers in JSON as JSON Schema counts them (and so the OpenAPI document
//! promises): `1.0` and `1e3` are the integers 1 and 1000; `1.5` is no
//! integer. A number with a fraction or exponent is taken only where an
//! `f64` holds it exactly (up to 2^53); past that, only digits.

use serde::de::{Deserializer, Error, Unexpected, Visitor};

/// The integer `value` is, when it has no fraction and is exact.
pub fn integral(value: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (value.fract() == 0.0 && value.abs() <= EXACT).then_some(value as i64)
}

/// `#[serde(deserialize_with = "integer")]` on an integer field.
pub fn integer<'de, D: Deserializer<'de>, T: TryFrom<i64>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_any(Integer(std::marker::PhantomData))
}

/// The same for an optional field (with `#[serde(default)]`; `null` is
/// none).
pub fn optional_integer<'de, D: Deserializer<'de>, T: TryFrom<i64>>(deserializer: D) -> Result<Option<T>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(bound = "T: TryFrom<i64>")]
    struct Whole<T>(#[serde(deserialize_with = "integer")] T);
    <Option<Whole<T>> as serde::Deserialize>::deserialize(deserializer).map(|whole| whole.map(|w| w.0))
}

struct Integer<T>(std::marker::PhantomData<T>);

impl<T: TryFrom<i64>> Visitor<'_> for Integer<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an integer within its range")
    }

    fn visit_i64<E: Error>(self, value: i64) -> Result<T, E> {
        T::try_from(value).map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_u64<E: Error>(self, value: u64) -> Result<T, E> {
        let signed = i64::try_from(value).map_err(|_| E::invalid_value(Unexpected::Unsigned(value), &self))?;
        self.visit_i64(signed)
    }

    fn visit_f64<E: Error>(self, value: f64) -> Result<T, E> {
        let whole = integral(value).ok_or_else(|| E::invalid_value(Unexpected::Float(value), &self))?;
        self.visit_i64(whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[serde(deserialize_with = "integer")]
        n: u32,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Optional {
        #[serde(default, deserialize_with = "optional_integer")]
        n: Option<i64>,
    }

    #[test]
    fn whole_numbers_in_any_notation_and_nothing_else() {
        let read = |json: &str| serde_json::from_str::<Body>(json).map(|b| b.n).map_err(|e| e.to_string());
        assert_eq!(read(r#"{"n": 7}"#), Ok(7));
        assert_eq!(read(r#"{"n": 7.0}"#), Ok(7));
        assert_eq!(read(r#"{"n": 7e2}"#), Ok(700));
        for bad in [r#"{"n": 7.5}"#, r#"{"n": -1}"#, r#"{"n": 4294967296}"#, r#"{"n": "7"}"#, r#"{"n": 1e300}"#] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let optional = |json: &str| serde_json::from_str::<Optional>(json).map(|b| b.n).map_err(|e| e.to_string());
        assert_eq!(
            (optional("{}"), optional(r#"{"n": null}"#), optional(r#"{"n": 2.0}"#)),
            (Ok(None), Ok(None), Ok(Some(2)))
        );
        assert!(optional(r#"{"n": 2.5}"#).is_err());
        assert_eq!(integral(9_007_199_254_740_993.0), Some(9_007_199_254_740_992));
        assert_eq!(integral(1e17), None);
    }
}
