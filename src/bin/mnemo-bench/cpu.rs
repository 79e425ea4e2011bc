//! CPU time of the server and of the PostgreSQL cluster, from `/proc`.

/// The name, parent pid and utime, stime, cutime, cstime (clock ticks) of a `stat` file of
/// `/proc` (a process's or a thread's).
fn parse_stat(text: &str) -> Option<(&str, u32, [u64; 4])> {
    // `<pid> (<name>) <state> ...`: the name may hold spaces and parentheses; the fields after
    // it do not.
    let (open, close) = (text.find('(')?, text.rfind(')')?);
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let mut times = [0u64; 4];
    for (i, time) in times.iter_mut().enumerate() {
        *time = fields.get(11 + i)?.parse().ok()?;
    }
    Some((&text[open + 1..close], ppid, times))
}

/// The parent pid and utime, stime, cutime, cstime (clock ticks) of `/proc/<pid>/stat`.
pub(crate) fn proc_stat(pid: u32) -> Option<(u32, [u64; 4])> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).map(|(_, ppid, times)| (ppid, times))
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
    let mut total = 0;
    for entry in std::fs::read_dir(format!("/proc/{}/task", pid?))
        .ok()?
        .flatten()
    {
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((name, _, times)) = parse_stat(&text)
            && name.starts_with(prefix)
        {
            total += times[0] + times[1];
        }
    }
    Some(total)
}

/// CPU ticks so far of this process (the load generator itself).
pub(crate) fn own_ticks() -> Option<u64> {
    proc_stat(std::process::id()).map(|(_, t)| t[0] + t[1])
}
