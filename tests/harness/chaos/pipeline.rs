//! The services as child processes, on either topology: one of each on the
//! single-node servers, or two of each behind HAProxy on the replicated one.

use crate::{Child, TestEnv, Topology};
use std::time::Duration;

/// One kind of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Edge,
    Order,
    Compensator,
}

impl Kind {
    fn binary(self) -> &'static str {
        match self {
            Self::Edge => "seckill-edge",
            Self::Order => "seckill-order",
            Self::Compensator => "seckill-compensator",
        }
    }
}

/// The running services.
pub struct Pipeline {
    /// Where the load goes: the edge, or HAProxy in front of the edges.
    pub url: String,
    edge_addrs: Vec<String>,
    env: Vec<(String, String)>,
    /// What a kind's environment adds.
    extra: Vec<(Kind, String, String)>,
    running: Vec<(Kind, usize, Option<Child>)>,
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port()
}

impl Pipeline {
    /// Starts the services for `test`'s topology.
    pub fn start(test: &TestEnv) -> Self {
        Self::start_with(test, &[])
    }

    /// [`Pipeline::start`], each service of `extra`'s kinds with its
    /// variable in its environment.
    pub fn start_with(test: &TestEnv, extra: &[(Kind, &str, &str)]) -> Self {
        let mut env = test.child_env();
        // Every service agrees on the delivery timeout.
        env.push(("SECKILL__KAFKA__MESSAGE_TIMEOUT_MS".into(), "3000".into()));
        let (url, edge_addrs, instances) = match test.topology {
            Topology::Single | Topology::RedisCluster => {
                let addr = format!("127.0.0.1:{}", free_port());
                (format!("http://{addr}"), vec![addr], 1)
            }
            // The ports HAProxy's configuration names (infra/haproxy).
            Topology::Cluster => {
                ("http://127.0.0.1:8080".into(), vec!["127.0.0.1:8081".into(), "127.0.0.1:8082".into()], 2)
            }
        };
        let extra = extra.iter().map(|(kind, k, v)| (*kind, k.to_string(), v.to_string())).collect();
        let mut pipeline = Self { url, edge_addrs, env, extra, running: Vec::new() };
        for kind in [Kind::Edge, Kind::Order, Kind::Compensator] {
            for index in 0..instances {
                let child = pipeline.spawn(kind, index);
                pipeline.running.push((kind, index, Some(child)));
            }
        }
        pipeline
    }

    fn spawn(&self, kind: Kind, index: usize) -> Child {
        let mut env = self.env.clone();
        let own: Vec<(&str, String)> = match kind {
            Kind::Edge => {
                vec![("SECKILL_HTTP_ADDR", self.edge_addrs[index].clone()), ("SECKILL__SOLD_OUT_FLAG_MS", "500".into())]
            }
            Kind::Order => {
                vec![("SECKILL__METRICS_ADDR", "127.0.0.1:0".into()), ("SECKILL__RETRY__MAX_MS", "1000".into())]
            }
            Kind::Compensator => vec![
                ("SECKILL__METRICS_ADDR", "127.0.0.1:0".into()),
                ("SECKILL__RETRY__MAX_MS", "1000".into()),
                ("SECKILL__SWEEPER__GRACE_MS", "1000".into()),
                ("SECKILL__SWEEPER__INTERVAL_MS", "500".into()),
                ("SECKILL__SWEEPER__LOCK_LEASE_MS", "3000".into()),
            ],
        };
        env.extend(own.into_iter().map(|(k, v)| (k.to_owned(), v)));
        env.extend(self.extra.iter().filter(|(k, _, _)| *k == kind).map(|(_, k, v)| (k.clone(), v.clone())));
        Child::start(kind.binary(), &env)
    }

    /// Waits until every edge answers `/readyz`.
    pub async fn wait_ready(&self) {
        for addr in &self.edge_addrs {
            let url = format!("http://{addr}");
            crate::eventually("an edge to be ready", Duration::from_secs(60), || async {
                let client = crate::http::Client::new(url.clone());
                match tokio::time::timeout(
                    Duration::from_secs(2),
                    client.try_send(hyper::Method::GET, "/readyz", None, &[]),
                )
                .await
                {
                    Ok(Ok(reply)) if reply.status == 200 => Ok(()),
                    _ => Err(url.clone()),
                }
            })
            .await;
        }
    }

    /// Order requests the edges running now answered, every outcome (each
    /// edge's `seckill_edge_orders_total`; an edge that does not answer,
    /// or was restarted, counts what it has).
    pub async fn orders_answered(&self) -> u64 {
        let mut answered = 0.0;
        for addr in &self.edge_addrs {
            let client = crate::http::Client::new(format!("http://{addr}"));
            let reply = tokio::time::timeout(
                Duration::from_secs(2),
                client.try_send(hyper::Method::GET, "/metrics", None, &[]),
            )
            .await;
            let Ok(Ok(reply)) = reply else { continue };
            answered += reply
                .text
                .lines()
                .filter(|line| line.starts_with("seckill_edge_orders_total{"))
                .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>();
        }
        answered as u64
    }

    /// `kill -9` the first instance of `kind`, and start it again a second later.
    pub async fn kill_and_restart(&mut self, kind: Kind) {
        let slot = self.running.iter_mut().find(|(k, _, _)| *k == kind).expect("an instance of that kind");
        let index = slot.1;
        if let Some(child) = slot.2.take() {
            child.kill9().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let child = self.spawn(kind, index);
        let slot = self.running.iter_mut().find(|(k, i, _)| *k == kind && *i == index).expect("the slot");
        slot.2 = Some(child);
    }

    /// SIGTERM to the first instance of `kind` (it must stop cleanly); it
    /// stays stopped until [`Pipeline::resume`].
    pub async fn pause(&mut self, kind: Kind) {
        let slot = self.running.iter_mut().find(|(k, _, _)| *k == kind).expect("an instance of that kind");
        if let Some(child) = slot.2.take() {
            assert!(child.terminate().await, "{kind:?} did not stop cleanly on SIGTERM");
        }
    }

    /// Starts the first instance of `kind` again.
    pub fn resume(&mut self, kind: Kind) {
        let index = self.running.iter().find(|(k, _, _)| *k == kind).expect("an instance of that kind").1;
        let child = self.spawn(kind, index);
        let slot = self.running.iter_mut().find(|(k, i, _)| *k == kind && *i == index).expect("the slot");
        slot.2 = Some(child);
    }

    /// The last warnings of every running service, for a failure's message.
    pub fn warnings(&self) -> String {
        let mut out = String::new();
        for (kind, index, child) in &self.running {
            if let Some(child) = child {
                out.push_str(&format!("\n--- {kind:?} {index}, its last warnings:\n"));
                out.push_str(&child.warnings(6).join("\n"));
            }
        }
        out
    }

    /// SIGTERM to every service; each must stop cleanly.
    pub async fn stop(self) {
        for (kind, index, child) in self.running {
            if let Some(child) = child {
                assert!(child.terminate().await, "{kind:?} {index} did not stop cleanly on SIGTERM");
            }
        }
    }
}
