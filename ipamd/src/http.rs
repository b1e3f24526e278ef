//! The introspection HTTP server on a loopback address (axum): `GET /ip-manager`, the
//! pool's state as JSON, and `GET /metrics`, Prometheus text.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::manager::Ipamd;

/// The routes.
pub fn router(ipamd: Arc<Ipamd>) -> Router {
    Router::new()
        .route("/ip-manager", get(ip_manager))
        .route("/metrics", get(metrics))
        .with_state(ipamd)
}

async fn ip_manager(State(ipamd): State<Arc<Ipamd>>) -> impl IntoResponse {
    Json(ipamd.show())
}

async fn metrics(State(ipamd): State<Arc<Ipamd>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        ipamd.metrics().encode(),
    )
}

/// Serves `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, ipamd: Arc<Ipamd>) -> std::io::Result<()> {
    axum::serve(listener, router(ipamd)).await
}
