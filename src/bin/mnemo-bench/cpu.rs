//! CPU time of the server and of the PostgreSQL cluster, from `/proc`.

/// The parent pid and utime, stime, cutime, cstime (clock ticks) of `/proc/<pid>/stat`.
pub(crate) fn proc_stat(pid: u32) -> Option<(u32, [u64; 4])> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after it do not.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let mut times = [0u64; 4];
    for (i, time) in times.iter_mut().enumerate() {
        *time = fields.get(11 + i)?.parse().ok()?;
    }
    Some((ppid, times))
}

/// CPU ticks so far of the server process, and of the PostgreSQL cluster: the postmaster with the
/// children it has reaped, plus its live children.
pub(crate) fn cpu_ticks(
    server: Option<u32>,
    postmaster: Option<u32>,
) -> (Option<u64>, Option<u64>) {
    let server = server.and_then(proc_stat).map(|(_, t)| t[0] + t[1]);
    let cluster = postmaster.and_then(|pm| {
        let (_, own) = proc_stat(pm)?;
        let mut total: u64 = own.iter().sum();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some((ppid, t)) = proc_stat(pid)
                && ppid == pm
            {
                total += t[0] + t[1];
            }
        }
        Some(total)
    });
    (server, cluster)
}

/// CPU ticks so far of the threads of `pid` whose name starts with `prefix` (as the local
/// embedder's `mnemo-embed-<n>`), from `/proc/<pid>/task/*/stat`.
pub(crate) fn thread_ticks(pid: Option<u32>, prefix: &str) -> Option<u64> {
    let pid = pid?;
    let mut total = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `<tid> (<name>) <state> ...`: the name sits between the first '(' and the last ')'.
        let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else {
            continue;
        };
        if !text[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        total += utime + stime;
    }
    Some(total)
}

/// CPU ticks so far of this process (the load generator itself).
pub(crate) fn own_ticks() -> Option<u64> {
    proc_stat(std::process::id()).map(|(_, t)| t[0] + t[1])
}
