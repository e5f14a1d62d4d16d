//! Starting and stopping the servers under test: a free port on 127.0.0.1, a fresh
//! temporary data directory, readiness, and a kill on drop.
//!
//! A [`ServerProcess`] owns the child process and its [`TempDir`]. The child's stdout and
//! stderr go to `<dir>/<name>.log`, so a server that fails to start (or dies) is reported
//! with the tail of its own log. Dropping the value kills the child (SIGKILL), reaps it,
//! and only then removes the directory, on every path, errors included.

use std::ffi::OsStr;
use std::fmt;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tempfile::TempDir;

/// How many lines of a server's log an error quotes.
const LOG_TAIL_LINES: usize = 20;

/// Directories searched for server programs after `PATH` (Debian puts `nats-server`
/// in `/usr/sbin`, which is often not on a non-root `PATH`).
const EXTRA_DIRS: [&str; 3] = ["/usr/sbin", "/usr/bin", "/usr/local/bin"];

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("binding 127.0.0.1:0 to find a free port")?;
    Ok(listener
        .local_addr()
        .context("reading the address of a bound socket")?
        .port())
}

/// The path of `program`, looked up on `PATH` and then in `/usr/sbin`, `/usr/bin` and
/// `/usr/local/bin`. A name with a `/` is taken as a path.
pub(crate) fn find_program(program: &str) -> anyhow::Result<PathBuf> {
    if program.contains('/') {
        let path = PathBuf::from(program);
        anyhow::ensure!(is_executable(&path), "{program} is not an executable file");
        return Ok(path);
    }
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{program} not found: run bench/peers/install \
                 (apt-get install redis-server nats-server)"
            )
        })
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A server under test: a child process listening on 127.0.0.1:`port`, with its data
/// and log in a temporary directory. Killed and reaped on drop, before the directory
/// is removed.
pub(crate) struct ServerProcess {
    name: String,
    port: u16,
    log: PathBuf,
    child: Child,
    /// Declared last so it is removed after [`Drop::drop`] has killed the child.
    dir: TempDir,
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .field("log", &self.log)
            .finish()
    }
}

impl ServerProcess {
    /// Starts `program args...` with stdin closed and stdout and stderr appended to
    /// `<dir>/<name>.log`. `port` is only recorded (the caller puts it in `args`) for
    /// [`Self::wait_ready`] and [`Self::port`]. Returns as soon as the process is spawned;
    /// call [`Self::wait_ready`] before connecting.
    pub(crate) fn start<I, S>(
        program: &Path,
        args: I,
        dir: TempDir,
        port: u16,
        name: &str,
    ) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("opening {} twice", log.display()))?;
        // Its own process group, so the drop below also reaches the processes it forks
        // (Redis forks for AOF rewrites; a child left behind would keep writing into a
        // removed directory and take CPU from later runs).
        let child = Command::new(program)
            .args(args)
            .process_group(0)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Self {
            name: name.to_owned(),
            port,
            log,
            child,
            dir,
        })
    }

    /// [`Self::start`], then [`Self::wait_ready`].
    pub(crate) async fn start_ready<I, S>(
        program: &Path,
        args: I,
        dir: TempDir,
        port: u16,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut server = Self::start(program, args, dir, port, name)?;
        server.wait_ready(timeout).await?;
        Ok(server)
    }

    /// The server's name, as given to [`Self::start`].
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The port the server listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The temporary directory (data and log), removed on drop.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file the server's stdout and stderr go to.
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the server's log (empty if it cannot be read).
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        tail(&text, lines)
    }

    /// The exit status if the process has ended (without blocking).
    pub(crate) fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .with_context(|| format!("checking whether {} is running", self.name))
    }

    /// An error if the process has ended, quoting its log.
    pub(crate) fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.exited()? {
            None => Ok(()),
            Some(status) => Err(self.failure(&format!("exited ({status})"))),
        }
    }

    /// Polls until a TCP connection to 127.0.0.1:`port` succeeds. Fails, quoting the log,
    /// if the process exits first or `timeout` passes.
    pub(crate) async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                return Err(self.failure(&format!("exited during startup ({status})")));
            }
            if tokio::net::TcpStream::connect(self.addr()).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "is still running but not accepting connections on {} after {timeout:?}",
                    self.addr()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An error "`name` (pid) `what`", with the log's path and tail.
    pub(crate) fn failure(&self, what: &str) -> anyhow::Error {
        let log_tail = self.log_tail(LOG_TAIL_LINES);
        let log_tail = if log_tail.is_empty() {
            "(empty)".to_owned()
        } else {
            log_tail
        };
        anyhow::anyhow!(
            "{} (pid {}) {what}; last lines of {}:\n{log_tail}",
            self.name,
            self.child.id(),
            self.log.display()
        )
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SIGKILL to the whole process group (see `start`), then to the child itself:
        // the data is thrown away anyway. Errors mean it is already gone.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `lines` lines of `text`, without a trailing newline.
fn tail(text: &str, lines: usize) -> String {
    let trimmed = text.trim_end();
    let start = trimmed
        .rmatch_indices('\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    if lines == 0 {
        String::new()
    } else {
        trimmed[start..].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_takes_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a\nb\nc", 5), "a\nb\nc");
        assert_eq!(tail("", 3), "");
        assert_eq!(tail("a\nb", 0), "");
        assert_eq!(tail("only", 1), "only");
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[test]
    fn finds_programs_or_says_how_to_install() {
        assert!(find_program("sh").is_ok());
        let err = find_program("no-such-server-xyz").unwrap_err().to_string();
        assert!(err.starts_with("no-such-server-xyz not found: run bench/peers/install"));
    }

    #[tokio::test]
    async fn reports_a_server_that_exits_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let sh = find_program("sh").unwrap();
        let port = free_port().unwrap();
        let mut server = ServerProcess::start(
            &sh,
            ["-c", "echo starting; echo bad flag >&2; exit 3"],
            dir,
            port,
            "fake",
        )
        .unwrap();
        let err = server
            .wait_ready(Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("fake"), "{err}");
        assert!(err.contains("exited during startup"), "{err}");
        assert!(err.contains("bad flag"), "{err}");
    }

    #[tokio::test]
    async fn ready_when_listening_and_killed_on_drop() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let sh = find_program("sh").unwrap();
        let mut server = ServerProcess::start(
            &sh,
            ["-c", "sleep 60"],
            tempfile::tempdir().unwrap(),
            port,
            "sleeper",
        )
        .unwrap();
        server.wait_ready(Duration::from_secs(5)).await.unwrap();
        let dir = server.dir().to_owned();
        assert!(server.log_path().starts_with(&dir));
        assert!(dir.exists());
        drop(server);
        assert!(!dir.exists());
    }
}
