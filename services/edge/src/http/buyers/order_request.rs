//! The order request: a strict parse of exactly the three ids, each a
//! positive integer within i64 (`1.0` counts, as in JSON Schema), and an
//! optional `quantity` (1 to [`MAX_QUANTITY`]; the round's own most per
//! order is the deduction's to check); every refusal names the field.

use crate::http::bodies::OrderRequestBody;
use crate::http::errors::RequestError;
use crate::http::extract::FromJsonBody;
use seckill_shared::domain::{integer, ActivityId, SkuId, UserId, MAX_QUANTITY};
use serde_json::{Map, Value};

/// A validated order request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrderRequest {
    pub(super) activity: ActivityId,
    pub(super) sku: SkuId,
    pub(super) user: UserId,
    /// Units asked for, all or none.
    pub(super) quantity: u32,
}

const ORDER_FIELDS: [&str; 4] = ["activityId", "skuId", "userId", "quantity"];

impl FromJsonBody for OrderRequest {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        parse_order_request(bytes)
    }
}

/// Strict parse: a JSON object with exactly the three ids, each a positive
/// integer within i64, and perhaps a quantity. Every refusal names the
/// field.
fn parse_order_request(bytes: &[u8]) -> Result<OrderRequest, RequestError> {
    // A derived struct would also take `[1,2,3]`: only objects qualify.
    let is_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match is_object.then(|| serde_json::from_slice::<OrderRequestBody>(bytes)) {
        Some(Ok(fast)) => {
            let quantity = fast.quantity.unwrap_or(1);
            if let (Ok(activity), Ok(sku), Ok(user), true) = (
                ActivityId::new(fast.activity_id),
                SkuId::new(fast.sku_id),
                UserId::new(fast.user_id),
                (1..=i64::from(MAX_QUANTITY)).contains(&quantity),
            ) {
                return Ok(OrderRequest { activity, sku, user, quantity: quantity as u32 });
            }
        }
        // The derived parse refuses a key given twice; a JSON tree would
        // silently keep the last one.
        Some(Err(error)) if error.to_string().starts_with("duplicate field") => {
            return Err(RequestError::InvalidRequest(format!("request body: {error}")));
        }
        _ => {}
    }
    // Anything else is refused; this slower path finds the words for why.
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| RequestError::InvalidRequest(format!("request body is not valid JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(RequestError::InvalidRequest("request body must be a JSON object".into()));
    };
    if let Some(unknown) = object.keys().find(|k| !ORDER_FIELDS.contains(&k.as_str())) {
        return Err(RequestError::InvalidRequest(format!("unknown field '{unknown}'")));
    }
    Ok(OrderRequest {
        activity: ActivityId::new(positive_field(&object, "activityId")?).map_err(RequestError::invalid)?,
        sku: SkuId::new(positive_field(&object, "skuId")?).map_err(RequestError::invalid)?,
        user: UserId::new(positive_field(&object, "userId")?).map_err(RequestError::invalid)?,
        quantity: quantity_field(&object)?,
    })
}

/// `quantity`: 1 when absent, else 1 to [`MAX_QUANTITY`].
fn quantity_field(object: &Map<String, Value>) -> Result<u32, RequestError> {
    if !object.contains_key("quantity") {
        return Ok(1);
    }
    match positive_field(object, "quantity")? {
        n if n <= i64::from(MAX_QUANTITY) => Ok(n as u32),
        n => Err(RequestError::InvalidRequest(format!("quantity must be between 1 and {MAX_QUANTITY}, got {n}"))),
    }
}

fn positive_field(object: &Map<String, Value>, name: &str) -> Result<i64, RequestError> {
    match object.get(name) {
        None | Some(Value::Null) => Err(RequestError::InvalidRequest(format!("missing field '{name}'"))),
        // 1.0 is the integer 1, as JSON Schema (and so the document) has it.
        Some(Value::Number(n)) => match n.as_i64().or_else(|| n.as_f64().and_then(integer::integral)) {
            Some(v) if v > 0 => Ok(v),
            _ => Err(RequestError::InvalidRequest(format!("{name} must be a positive integer within i64, got {n}"))),
        },
        Some(other) => {
            Err(RequestError::InvalidRequest(format!("{name} must be a positive integer, got {}", json_type(other))))
        }
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bodies_are_refused_naming_the_field() {
        for (body, needle, why) in [
            (r#"{"activityId":1,"skuId":2}"#, "userId", "missing field"),
            (r#"{"activityId":1,"skuId":2,"userId":"42"}"#, "userId", "string id"),
            (r#"{"activityId":0,"skuId":2,"userId":4}"#, "activityId", "zero id"),
            (r#"{"activityId":1,"skuId":-2,"userId":4}"#, "skuId", "negative id"),
            (r#"{"activityId":1.5,"skuId":2,"userId":4}"#, "activityId", "fractional id"),
            (r#"{"activityId":99999999999999999999,"skuId":2,"userId":4}"#, "activityId", "beyond i64"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"extra":1}"#, "extra", "unknown field"),
            (r#"{"activityId":1,"skuId":2,"userId":null}"#, "userId", "null id"),
            (r#"[1,2,3]"#, "object", "not an object"),
            (r#"{"activityId":1,"#, "JSON", "truncated JSON"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"userId":5}"#, "duplicate field `userId`", "a key given twice"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"quantity":0}"#, "quantity", "no units"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"quantity":101}"#, "quantity", "above the most"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"quantity":1.5}"#, "quantity", "a fraction"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"quantity":null}"#, "quantity", "null quantity"),
        ] {
            let error = parse_order_request(body.as_bytes()).expect_err(why);
            assert_eq!(error.code().as_str(), "INVALID_REQUEST", "{why}");
            assert!(error.to_string().contains(needle), "{why}: '{error}' should name {needle}");
        }
    }

    #[test]
    fn good_bodies_parse() {
        let request = parse_order_request(br#"{"activityId":1001,"skuId":2001,"userId":42}"#).unwrap();
        assert_eq!((request.user.get(), request.quantity), (42, 1));
        let two = parse_order_request(br#"{"activityId":1001,"skuId":2001,"userId":42,"quantity":2}"#).unwrap();
        assert_eq!(two.quantity, 2);
        let spelled = parse_order_request(br#"{"quantity":3.0,"activityId":1001,"skuId":2001,"userId":42}"#);
        assert_eq!(spelled.map(|r| r.quantity).map_err(|e| e.to_string()), Ok(3));
        // An integer to JSON Schema, and so to the document.
        let whole = parse_order_request(br#"{"userId": 2931.0, "skuId": 1807017274171963.0, "activityId": 4e3}"#);
        let ids = whole.map(|r| (r.activity.get(), r.sku.get(), r.user.get())).map_err(|e| e.to_string());
        assert_eq!(ids, Ok((4000, 1807017274171963, 2931)));
    }
}
