//! Prometheus metrics kept per application instance (so tests can run many apps in one process):
//! requests by route template, method and status, and a latency histogram by route template.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
}

impl Metrics {
    pub fn record(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        if let Ok(mut requests) = self.requests.lock() {
            *requests
                .entry((route.to_owned(), method.to_owned(), status))
                .or_default() += 1;
        }
        if let Ok(mut latency) = self.latency.lock() {
            let h = latency.entry(route.to_owned()).or_default();
            let secs = elapsed.as_secs_f64();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += secs;
        }
    }

    /// The Prometheus text exposition, with the pool figures given by the caller.
    pub fn render(&self, pool_size: u32, pool_idle: usize, pool_max: u32) -> String {
        let mut out = String::new();
        out.push_str("# HELP mnemo_http_requests_total HTTP requests by route template, method and status.\n");
        out.push_str("# TYPE mnemo_http_requests_total counter\n");
        if let Ok(requests) = self.requests.lock() {
            for ((route, method, status), n) in requests.iter() {
                let _ = writeln!(
                    out,
                    "mnemo_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                    escape(route),
                    escape(method)
                );
            }
        }
        out.push_str(
            "# HELP mnemo_http_request_duration_seconds Request latency by route template.\n",
        );
        out.push_str("# TYPE mnemo_http_request_duration_seconds histogram\n");
        if let Ok(latency) = self.latency.lock() {
            for (route, h) in latency.iter() {
                let route = escape(route);
                for (i, bound) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "mnemo_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {}",
                        h.counts[i]
                    );
                }
                let _ = writeln!(
                    out,
                    "mnemo_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(
                    out,
                    "mnemo_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "mnemo_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                    h.count
                );
            }
        }
        out.push_str("# HELP mnemo_db_pool_connections Database pool connections by state.\n");
        out.push_str("# TYPE mnemo_db_pool_connections gauge\n");
        let idle = u32::try_from(pool_idle).unwrap_or(u32::MAX);
        let _ = writeln!(out, "mnemo_db_pool_connections{{state=\"idle\"}} {idle}");
        let _ = writeln!(
            out,
            "mnemo_db_pool_connections{{state=\"in_use\"}} {}",
            pool_size.saturating_sub(idle)
        );
        out.push_str("# HELP mnemo_db_pool_max_connections Configured pool capacity.\n");
        out.push_str("# TYPE mnemo_db_pool_max_connections gauge\n");
        let _ = writeln!(out, "mnemo_db_pool_max_connections {pool_max}");
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.record("/api/me", "GET", 200, Duration::from_millis(3));
        m.record("/api/me", "GET", 200, Duration::from_millis(30));
        let text = m.render(4, 3, 32);
        assert!(text.contains(
            "mnemo_http_requests_total{route=\"/api/me\",method=\"GET\",status=\"200\"} 2"
        ));
        assert!(text.contains(
            "mnemo_http_request_duration_seconds_bucket{route=\"/api/me\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "mnemo_http_request_duration_seconds_bucket{route=\"/api/me\",le=\"0.05\"} 2"
        ));
        assert!(text.contains("mnemo_db_pool_connections{state=\"in_use\"} 1"));
    }
}
