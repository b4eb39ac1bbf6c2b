//! The waiting room's page, `GET /queue/{activityId}/{skuId}` (`?userId=`
//! joins at once): join, the place and the estimated wait, then the order
//! and its status. No build step: the page, script and style are embedded
//! in the binary, as the dashboard's are.

use crate::http::errors::BuyerError;
use crate::http::pages::{asset, html};
use crate::http::state::Edge;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use seckill_shared::domain::SaleKey;

const PAGE: &str = include_str!("../../../assets/queue.html");
const SCRIPT: &str = include_str!("../../../assets/queue.js");
const STYLE: &str = include_str!("../../../assets/queue.css");

/// The page's routes.
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/queue/{activity_id}/{sku_id}", get(page))
        .route("/queue/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/queue/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
}

async fn page(Path((activity, sku)): Path<(String, String)>) -> Result<Response, BuyerError> {
    let parse = |raw: &str| raw.parse::<i64>().map_err(|_| BuyerError::invalid(format!("not an id: {raw:.20}")));
    let sale = SaleKey::from_raw(parse(&activity)?, parse(&sku)?).map_err(BuyerError::invalid)?;
    let body = PAGE.replace("{{activity}}", &sale.activity.to_string()).replace("{{sku}}", &sale.sku.to_string());
    Ok(html(StatusCode::OK, body))
}
