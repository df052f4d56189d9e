//! Which processes run in a process group, read from `/proc` (Linux): what a test checks after
//! a node process is killed or has exited. Plain std, so the CLI's tests include this file too.

/// The pids of the processes in process group `group`.
pub(crate) fn group_members(group: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // `pid (comm) state ppid pgrp …`: comm may hold spaces, so read after its `)`.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let pgrp = rest.split_whitespace().nth(2).and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(group) {
            members.push(pid);
        }
    }
    members
}
