//! A node in a process of its own: the test binary run again on one of its ignored tests,
//! which reads the node's settings from its environment — no other binary to build, and a
//! node with a scripted model, as in the other tests. Shared by the process tests through
//! `#[path]`.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::BOUND;

/// A node process, killed (and reaped) on drop if it still runs.
pub(crate) struct NodeProcess {
    child: Child,
}

impl NodeProcess {
    /// Runs this test binary's ignored test `test` alone, with `env` set.
    pub(crate) fn start(test: &str, env: &[(&str, String)]) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let child = Command::new(exe)
            .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            // A group of its own: whatever it started is found, and killed, with it.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("a node process");
        Self { child }
    }

    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"))
    }

    pub(crate) fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap_or_else(|e| panic!("{signal}: {e}"));
    }

    /// Waits (bounded) for the process to end; its exit status.
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("its status") {
                return status;
            }
            assert!(start.elapsed() < BOUND, "the node process did not end");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
