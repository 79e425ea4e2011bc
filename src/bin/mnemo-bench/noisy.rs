//! `noisy-neighbour`: one tenant floods while another does light requests.

use super::*;

/// The flooding tenant of `noisy-neighbour`, and the quiet one.
pub(crate) const NOISY: &str = "noisy";
pub(crate) const QUIET: &str = "quiet";

/// One answer: how long it took and its status (0: no answer).
pub(crate) type Answer = (Duration, u16);

pub(crate) fn mint(config: &Config, user: &str, tenant: &str) -> Result<String, String> {
    mnemo::auth::mint(config, user, tenant, &[], Duration::from_secs(3600))
        .map_err(|e| e.to_string())
}

/// PUTs `content` under `key` (created, or unchanged when it is already there).
pub(crate) async fn put_memory(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    key: &str,
    content: String,
) -> Result<(), String> {
    let response = http
        .put(format!("{base}/api/memories/{key}"))
        .bearer_auth(token)
        .json(&json!({"content": content, "description": "bench"}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("PUT {key} answered {status}: {text}"));
    }
    Ok(())
}

/// Runs every client of both tenants until `window` has passed; answers of the flood, then of the
/// quiet tenant.
pub(crate) async fn load_both(
    flood: &[Arc<Client>],
    flood_scenario: &'static str,
    quiet: &[Arc<Client>],
    window: Duration,
) -> Result<(Vec<Answer>, Vec<Answer>), String> {
    let deadline = Instant::now() + window;
    let spawn = |clients: &[Arc<Client>], scenario: &'static str| {
        clients
            .iter()
            .map(|client| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    let mut n = 0usize;
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let status = one(scenario, &client, n).await?;
                        answers.push((t.elapsed(), status));
                        n += 1;
                    }
                    Ok::<_, String>(answers)
                })
            })
            .collect::<Vec<_>>()
    };
    let flood_tasks = spawn(flood, flood_scenario);
    let quiet_tasks = spawn(quiet, "noisy-victim");
    let mut flood_answers = Vec::new();
    for task in flood_tasks {
        flood_answers.extend(task.await.map_err(|e| e.to_string())??);
    }
    let mut quiet_answers = Vec::new();
    for task in quiet_tasks {
        quiet_answers.extend(task.await.map_err(|e| e.to_string())??);
    }
    Ok((flood_answers, quiet_answers))
}

/// Counts of the answers that were not 2xx, as `429:12,503:3` (`0` when there are none).
pub(crate) fn failures(answers: &[Answer]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for (_, status) in answers {
        if !(200..300).contains(status) {
            *counts.entry(*status).or_insert(0usize) += 1;
        }
    }
    if counts.is_empty() {
        return "0".into();
    }
    counts
        .iter()
        .map(|(status, count)| format!("{status}:{count}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `noisy-neighbour`: one tenant floods, another does light requests; prints one line.
pub(crate) async fn noisy_neighbour(args: &Args, config: &Config) -> Result<(), String> {
    let flood_scenario = match args.flood.as_str() {
        "search" => "noisy-search",
        "write" => "noisy-write",
        other => return Err(format!("unknown --flood `{other}`; use search or write")),
    };
    let base = args.url.trim_end_matches('/').to_owned();
    let http = reqwest::Client::new();
    let client = |id: usize, token: String, prepared: Vec<String>| {
        Arc::new(Client {
            http: reqwest::Client::new(),
            base: base.clone(),
            token,
            id,
            prepared,
            users: Arc::new(Vec::new()),
            vocab: Arc::new(Vec::new()),
            run: 0,
            sessions: 1,
            motorhead: false,
        })
    };

    // The searcher's corpus, under fixed keys: a second run finds it unchanged and writes nothing.
    let searcher = mint(config, "searcher", NOISY)?;
    if args.flood == "search" {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (http, base, token, next) =
                (http.clone(), base.clone(), searcher.clone(), next.clone());
            let corpus = args.corpus;
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= corpus {
                        return Ok::<_, String>(());
                    }
                    put_memory(&http, &base, &token, &format!("corpus-{i}"), corpus_text(i))
                        .await?;
                }
            }));
        }
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
    }
    let mut flood = Vec::new();
    for id in 0..args.clients {
        let token = match args.flood.as_str() {
            "search" => searcher.clone(),
            _ => mint(config, &format!("writer-{id}"), NOISY)?,
        };
        flood.push(client(id, token, Vec::new()));
    }
    let mut quiet = Vec::new();
    for id in 0..args.victim_clients {
        let token = mint(config, &format!("quiet-{id}"), QUIET)?;
        let note = "a small memory of the quiet tenant: the build passed".to_owned();
        put_memory(&http, &base, &token, "note", note).await?;
        quiet.push(client(id, token, vec!["note".to_owned()]));
    }

    // Warm-up, not measured.
    load_both(&flood, flood_scenario, &quiet, Duration::from_secs(1)).await?;
    let cpu_before = cpu_ticks(args.server_pid, args.pg_pid);
    let started = Instant::now();
    let (flood_answers, quiet_answers) = load_both(
        &flood,
        flood_scenario,
        &quiet,
        Duration::from_secs(args.seconds),
    )
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = cpu_ticks(args.server_pid, args.pg_pid);

    let mut quiet_latencies: Vec<Duration> = quiet_answers.iter().map(|(d, _)| *d).collect();
    quiet_latencies.sort_unstable();
    let ok = |answers: &[Answer]| {
        answers
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .count()
    };
    let flood_ok = ok(&flood_answers);
    let requests = flood_answers.len() + quiet_answers.len();
    let seconds_used = |before: Option<u64>, after: Option<u64>| {
        Some(after?.saturating_sub(before?) as f64 / args.clock_ticks.max(1) as f64)
    };
    let server_cpu = seconds_used(cpu_before.0, cpu_after.0);
    let pg_cpu = seconds_used(cpu_before.1, cpu_after.1);
    let per_request = |cpu: Option<f64>| match cpu {
        Some(cpu) if requests > 0 => format!("{:.0}", cpu * 1e6 / requests as f64),
        _ => "n/a".into(),
    };
    let cores = |cpu: Option<f64>| cpu.map_or("n/a".into(), |cpu| format!("{:.2}", cpu / elapsed));
    println!(
        "scenario=noisy-neighbour flood={} clients={} victim_clients={} seconds={} \
         quiet_requests={} quiet_ok={} quiet_p50_ms={:.2} quiet_p99_ms={:.2} quiet_errors={} \
         flood_requests={} flood_ok={} flood_rps={:.0} flood_errors={} \
         server_cpu_us_per_req={} pg_cpu_us_per_req={} server_cores={} pg_cores={}",
        args.flood,
        args.clients,
        args.victim_clients,
        args.seconds,
        quiet_answers.len(),
        ok(&quiet_answers),
        percentile(&quiet_latencies, 50.0),
        percentile(&quiet_latencies, 99.0),
        failures(&quiet_answers),
        flood_answers.len(),
        flood_ok,
        flood_ok as f64 / elapsed,
        failures(&flood_answers),
        per_request(server_cpu),
        per_request(pg_cpu),
        cores(server_cpu),
        cores(pg_cpu),
    );
    Ok(())
}
