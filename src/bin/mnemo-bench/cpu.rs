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
    let cluster = postmaster.and_then(|pm| cluster_ticks(pm, proc_stat, live_pids));
    (server, cluster)
}

/// The pids in `/proc` now.
fn live_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// Scans of the cluster's processes tried before one is taken as it is.
const CLUSTER_SCANS: usize = 20;

/// The cluster's CPU ticks: the postmaster's own and its reaped children's, plus its live
/// children's. A child reaped while its siblings are read moves from the children into the
/// postmaster's reaped time between two reads: read before the scan, it is in neither count (a
/// backend of a client that just hung up lost this way, up to a fifth of a pgbench run's ticks),
/// read after it, in both. So the postmaster is read before and after the children, and the
/// scan counts only when its reaped time did not move in between (no child was reaped).
fn cluster_ticks(
    pm: u32,
    stat: impl Fn(u32) -> Option<(u32, [u64; 4])>,
    pids: impl Fn() -> Vec<u32>,
) -> Option<u64> {
    let reaped = |t: &[u64; 4]| t[2] + t[3];
    let (_, mut before) = stat(pm)?;
    let mut scans = 0;
    loop {
        scans += 1;
        let children: u64 = pids()
            .into_iter()
            .filter_map(|pid| stat(pid).filter(|(ppid, _)| *ppid == pm))
            .map(|(_, t)| t[0] + t[1])
            .sum();
        let (_, after) = stat(pm)?;
        if reaped(&after) == reaped(&before) || scans == CLUSTER_SCANS {
            return Some(after.iter().sum::<u64>() + children);
        }
        before = after;
    }
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::cluster_ticks;

    const PM: u32 = 100;

    /// A `/proc` that the test changes between reads: pid -> (ppid, times).
    type Procs = RefCell<BTreeMap<u32, (u32, [u64; 4])>>;

    fn procs(children: &[(u32, u64)]) -> Procs {
        let mut map = BTreeMap::from([(PM, (1, [5, 5, 0, 0])), (7, (1, [999, 0, 0, 0]))]);
        for &(pid, ticks) in children {
            map.insert(pid, (PM, [ticks, 0, 0, 0]));
        }
        RefCell::new(map)
    }

    /// Moves a child's ticks into the postmaster's reaped time and removes it, as `wait` does.
    fn reap(procs: &Procs, pid: u32) {
        let mut map = procs.borrow_mut();
        let (_, t) = map.remove(&pid).unwrap();
        map.get_mut(&PM).unwrap().1[2] += t[0] + t[1];
    }

    #[test]
    fn counts_the_postmaster_its_reaped_and_its_live_children_only() {
        let procs = procs(&[(201, 30), (202, 40)]);
        reap(&procs, 202);
        let ticks = cluster_ticks(
            PM,
            |pid| procs.borrow().get(&pid).copied(),
            || procs.borrow().keys().copied().collect(),
        );
        // 10 of the postmaster's own, 40 reaped, 30 live; pid 7 is not the postmaster's child.
        assert_eq!(ticks, Some(80));
    }

    #[test]
    fn a_child_reaped_during_the_scan_is_counted_once() {
        for reaped_at_read in 1..=5 {
            let procs = procs(&[(201, 30), (202, 40), (203, 50)]);
            let reads = RefCell::new(0);
            let ticks = cluster_ticks(
                PM,
                |pid| {
                    // The backend 202 is reaped just before the read numbered `reaped_at_read` of
                    // the scan (7, 201, 202, 203, then the postmaster again): before its own read
                    // it would be missed, after it counted twice.
                    *reads.borrow_mut() += 1;
                    if *reads.borrow() == 1 + reaped_at_read && procs.borrow().contains_key(&202) {
                        reap(&procs, 202);
                    }
                    procs.borrow().get(&pid).copied()
                },
                || vec![7, 201, 202, 203],
            );
            assert_eq!(ticks, Some(130), "reaped before read {reaped_at_read}");
        }
    }

    #[test]
    fn a_postmaster_gone_gives_nothing() {
        let procs = procs(&[(201, 30)]);
        procs.borrow_mut().remove(&PM);
        let ticks = cluster_ticks(
            PM,
            |pid| procs.borrow().get(&pid).copied(),
            || procs.borrow().keys().copied().collect(),
        );
        assert_eq!(ticks, None);
    }
}
