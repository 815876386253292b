//! The control socket of a running link: `pathem ctl NAME show|set` talks to it.
//!
//! Every `run`, `attach` and `shell` listens on `/run/pathem/NAME.sock`, a Unix socket of mode 0600
//! owned by whoever started pathem. A name taken by a live instance is refused; a socket
//! left by a killed one (nobody answers on it) is replaced; the socket is removed when the
//! link stops. The protocol is one JSON object per line each way, typed on both ends by the
//! same serde types ([`Request`], [`Reply`]) and versioned ([`PROTOCOL`], in every message):
//! `{"version":1,"cmd":"show"}` answers the link's [`State`]; `{"version":1,"cmd":"set",
//! "args":[…]}` hands the words of `ctl set` to the link's [`Setter`] (the one spec parser:
//! flags as `run` takes them) and answers once the change is in effect, or refused with one
//! line. A message of another version (an older or newer pathem) gets a line saying which
//! versions meet, never a parse failure. The data path is not involved:
//! `show` reads single-writer counters and what the controls last reported, `set` goes through
//! each pipeline's `Control`.

use crate::Error;
use pathem_engine::{Control, DirectionCounters};
use pathem_spec::PathSpec;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where control sockets live.
pub const SOCKET_DIR: &str = "/run/pathem";

/// Applies the words of a `ctl set` to the link (parsing them as `run` parses its flags);
/// the error is one line for the user.
pub type Setter = Box<dyn Fn(&[String], Option<&Path>) -> Result<(), Refusal> + Send + Sync>;

/// Why a `ctl set` changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Its words are not flags pathem takes, or make a path that is not valid.
    #[error(transparent)]
    Spec(#[from] pathem_spec::SpecError),
    /// The running link cannot take the path (a setting out of range, or it has stopped).
    #[error(transparent)]
    Change(#[from] pathem_engine::ChangeError),
    /// `--ingress` for an attach whose ingress is left alone.
    #[error("--{0} is not attached on this interface; start the attach with --{0} to impair it")]
    NotAttached(&'static str),
    /// `--class NAME` for a class no direction has.
    #[error("--class {name}: no class of that name (classes: {known}); classes cannot be added or removed on a running link: restart it with the new --class")]
    NoClass { name: String, known: String },
    /// `--class default`: the default path is not a class.
    #[error("--class default: the default path is changed by the flags without --class (`ctl NAME set --delay 5ms`)")]
    DefaultClass,
    /// `--b-to-a` on a link that forwards one way only.
    #[error("--b-to-a: this link forwards a -> b only (--one-way); it has no b -> a path to change")]
    OneWay,
    /// The change was sent but not applied in time (the link is stuck).
    #[error("the change was sent but the link has not applied it within 1 s")]
    NotApplied,
}

/// A name is 1 to 64 characters of letters, digits, `-`, `_` and `.` (not starting with `.`),
/// and not `list`, which `ctl list` takes for itself (a link of that name could not be shown
/// or changed).
pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "list"
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(Error::Name(name.into()));
    }
    Ok(())
}

/// Fails when a running pathem answers on `name`'s socket already.
pub fn check_free(name: &str) -> Result<(), Error> {
    check_name(name)?;
    if UnixStream::connect(socket_path(name)).is_ok() {
        return Err(Error::NameTaken(name.into()));
    }
    Ok(())
}

/// The socket of `name`.
pub fn socket_path(name: &str) -> PathBuf {
    Path::new(SOCKET_DIR).join(format!("{name}.sock"))
}

/// The version of the control protocol this pathem speaks.
pub const PROTOCOL: u32 = 1;

/// A request, as the client sends it and the server reads it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "cmd", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// The link's state.
    Show,
    /// The words of `ctl set`, for the link's [`Setter`], and the client's directory, where
    /// a relative file name in them (`--loss trace:FILE`) is (absent from an older client).
    Set {
        args: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<PathBuf>,
    },
}

impl Request {
    /// How long a client waits for the answer: a change may allocate delay lines of
    /// gigabytes and touch every page of them before it answers, so it gets minutes
    /// ([`SET_WAIT`]), where `show` gets seconds.
    pub fn answer_within(&self) -> Duration {
        match self {
            Request::Show => Duration::from_secs(5),
            Request::Set { .. } => SET_WAIT,
        }
    }

    /// `set` with the words of `ctl set`, from this process's directory (which the protocol
    /// carries as text: a directory whose name is not UTF-8 cannot be sent, and is refused).
    pub fn set(args: Vec<String>) -> Result<Request, crate::Error> {
        let cwd = std::env::current_dir().ok();
        if let Some(dir) = cwd.as_ref().filter(|d| d.to_str().is_none()) {
            return Err(crate::Error::Unsendable(format!(
                "the current directory, {}, is not UTF-8 text, which the control protocol carries: run `pathem ctl` from another",
                dir.display()
            )));
        }
        Ok(Request::Set { args, cwd })
    }
}

/// An answer, as the server sends it and the client reads it.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "reply", rename_all = "lowercase")]
pub enum Reply {
    State(Box<State>),
    /// The change is in effect.
    Changed,
    /// Refused, with one line for the user; `usage` when the request asked what cannot be
    /// (exit 2), not when the link could not do it (stopped, stuck: exit 1). A reply without
    /// it (an older pathem of the same protocol) is taken as usage, as all were.
    Refused {
        error: String,
        #[serde(default = "yes")]
        usage: bool,
    },
}

fn yes() -> bool {
    true
}

impl Refusal {
    /// True when the request asked what cannot be, false when the running link failed to do
    /// what could be (it stopped, or has not applied the change).
    pub fn is_usage(&self) -> bool {
        match self {
            Refusal::Spec(e) => e.is_usage(),
            Refusal::Change(pathem_engine::ChangeError::Stopped) | Refusal::NotApplied => false,
            Refusal::Change(_)
            | Refusal::NotAttached(_)
            | Refusal::NoClass { .. }
            | Refusal::DefaultClass
            | Refusal::OneWay => true,
        }
    }
}

/// A message of either kind with the protocol's version.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Message<T> {
    pub version: u32,
    #[serde(flatten)]
    pub body: T,
}

/// One direction as `show` reports it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct DirectionState {
    /// The path in effect, in words (the default path's, with classes).
    pub path: String,
    /// The direction's totals.
    pub stats: pathem_engine::Stats,
    /// With classes: each path's own, the default path first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassState>,
}

/// One class (or the default path) as `show` and `replay --stats` report it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ClassState {
    pub class: String,
    /// Its filter (empty for the default path).
    pub filter: String,
    pub path: String,
    pub stats: pathem_engine::Stats,
}

impl ClassState {
    /// `class NAME ("FILTER"): PATH`, the line that heads its counters.
    pub fn heading(&self) -> String {
        // A class's filter may be empty too (it takes every frame): the name tells them apart.
        let filter = if self.class == pathem_engine::DEFAULT_CLASS {
            "frames no class takes".into()
        } else if self.filter.is_empty() {
            "\"\": every frame".into()
        } else {
            format!("{:?}", self.filter)
        };
        format!("class {} ({filter}): {}", self.class, self.path)
    }
}

/// What a direction started with, for `ctl set` to build on: the default path's spec and each
/// class's name, filter and spec, in order.
#[derive(Clone, Debug, Default)]
pub struct DirectionSpecs {
    pub path: PathSpec,
    pub classes: Vec<(String, String, PathSpec)>,
    /// The schedule's steps as specs: the default path's, and each class's (in the classes'
    /// order); empty where no schedule changes the path.
    pub steps: Vec<PathSpec>,
    pub class_steps: Vec<Vec<PathSpec>>,
}

impl From<&pathem_spec::link::Direction> for DirectionSpecs {
    fn from(d: &pathem_spec::link::Direction) -> DirectionSpecs {
        let classes =
            d.classes.iter().map(|c| (c.name.clone(), c.filter.to_string(), c.spec.clone())).collect();
        let class_steps = d.classes.iter().map(|c| c.schedule_specs.clone()).collect();
        DirectionSpecs { path: d.spec.clone(), classes, steps: d.schedule_specs.clone(), class_steps }
    }
}

impl DirectionSpecs {
    /// Path `lane`'s spec at the start (0: the default path) and its schedule's steps.
    fn lane(&self, lane: usize) -> (&PathSpec, &[PathSpec]) {
        match lane {
            0 => (&self.path, &self.steps),
            l => (&self.classes[l - 1].2, self.class_steps.get(l - 1).map_or(&[][..], Vec::as_slice)),
        }
    }
}

/// What `show` answers.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct State {
    pub name: String,
    pub pid: u32,
    pub uptime_s: f64,
    pub seed: u64,
    pub port_a: String,
    pub port_b: String,
    /// Each port as it was opened: its kind, where its receive stamps come from (hardware,
    /// kernel, software), how it times transmission (absent from an older pathem's answer).
    #[serde(default)]
    pub how_a: String,
    #[serde(default)]
    pub how_b: String,
    pub a_to_b: DirectionState,
    pub b_to_a: Option<DirectionState>,
}

impl State {
    /// `ctl NAME show`'s text: each direction's path, counters, queue and delay line.
    pub fn describe(&self) -> String {
        let mut out =
            format!("{} (pid {}, up {:.1} s, seed {})\n", self.name, self.pid, self.uptime_s, self.seed);
        let (a, b) = (&self.port_a, &self.port_b);
        for (name, how) in [(a, &self.how_a), (b, &self.how_b)] {
            if !how.is_empty() {
                out += &format!("  port {name}: {how}\n");
            }
        }
        for (from, to, d) in [(a, b, Some(&self.a_to_b)), (b, a, self.b_to_a.as_ref())] {
            let Some(d) = d else { continue };
            let s = &d.stats;
            out += &format!("  {from} -> {to}: {}\n    {}\n", d.path, s.line("counters"));
            out += &format!(
                "    link queue {} frames / {} B; delay line {} of {} B\n",
                s.queue_frames, s.queue_bytes, s.delay_line_used, s.delay_line_capacity
            );
            for c in &d.classes {
                out += &format!("    {}\n      {}\n", c.heading(), c.stats.line("counters"));
            }
        }
        out
    }

    /// `ctl list`'s line of this link.
    pub fn list_line(&self) -> String {
        format!(
            "{}\tpid {}\t{} <-> {}\tup {:.0} s",
            self.name, self.pid, self.port_a, self.port_b, self.uptime_s
        )
    }
}

/// `ctl list`'s lines: each running link with its ports and age (its name alone when it does
/// not answer `show`).
pub fn list_lines() -> Vec<String> {
    list()
        .into_iter()
        .map(|name| match request(&name, Request::Show) {
            Ok(Reply::State(s)) => s.list_line(),
            _ => name,
        })
        .collect()
}

/// What a running link shows and how it is changed.
pub struct Served {
    pub name: String,
    pub seed: u64,
    pub port_a: String,
    pub port_b: String,
    /// The ports' descriptions ([`State::how_a`]).
    pub how: (String, String),
    pub controls: (Vec<Control>, Option<Vec<Control>>),
    pub counters: (DirectionCounters, Option<DirectionCounters>),
    /// Each direction's class filters, in order (for `show`).
    pub filters: (Vec<String>, Vec<String>),
    pub setter: Setter,
    pub since: pathem_model::Nanos,
}

impl Served {
    fn state(&self) -> State {
        let dir = |c: &[Control], k: &DirectionCounters, filters: &[String]| {
            let (stats, classes) = k.read();
            DirectionState {
                path: c[0].current().to_string(),
                stats,
                classes: classes
                    .into_iter()
                    .zip(c)
                    .enumerate()
                    .map(|(i, ((name, stats), control))| ClassState {
                        class: name,
                        filter: i.checked_sub(1).and_then(|i| filters.get(i)).cloned().unwrap_or_default(),
                        path: control.current().to_string(),
                        stats,
                    })
                    .collect(),
            }
        };
        State {
            name: self.name.clone(),
            pid: std::process::id(),
            uptime_s: (pathem_engine::monotonic_now() - self.since).as_secs_f64(),
            seed: self.seed,
            port_a: self.port_a.clone(),
            port_b: self.port_b.clone(),
            how_a: self.how.0.clone(),
            how_b: self.how.1.clone(),
            a_to_b: dir(&self.controls.0, &self.counters.0, &self.filters.0),
            b_to_a: match (&self.controls.1, &self.counters.1) {
                (Some(c), Some(k)) => Some(dir(c, k, &self.filters.1)),
                _ => None,
            },
        }
    }
}

/// The version a message says it speaks (0: older than versions, or no message at all).
/// The protocol version a line says: 0 for an object without one (a client from before
/// versions), and a line that is no JSON object, or whose version is no whole number, refused
/// as such rather than taken for another version.
fn version_of(line: &str) -> Result<u32, BadRequest> {
    object_of(line).and_then(|o| version_in(&o))
}

/// A line as the JSON object it must be.
fn object_of(line: &str) -> Result<serde_json::Map<String, serde_json::Value>, BadRequest> {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(o)) => Ok(o),
        _ => Err(BadRequest::NotJson),
    }
}

/// [`version_of`] a line already read as an object.
fn version_in(object: &serde_json::Map<String, serde_json::Value>) -> Result<u32, BadRequest> {
    match object.get("version") {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .map(|v| v.min(u64::from(u32::MAX)) as u32)
            .ok_or_else(|| BadRequest::Malformed(format!("its version is {v}, not a whole number"))),
    }
}

/// Why a request line was refused: the one-line answer the client gets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadRequest {
    #[error("not a request: a JSON object per line is expected")]
    NotJson,
    #[error("the client speaks control protocol {0} and this pathem {PROTOCOL}: use the pathem that started the link for `pathem ctl`")]
    Version(u32),
    #[error("{0}; accepted: show, set")]
    Unknown(String),
    #[error("not a request: {0}")]
    Malformed(String),
}

/// Parses one request line.
pub fn parse_request(line: &str) -> Result<Request, BadRequest> {
    let object = object_of(line)?;
    match version_in(&object)? {
        PROTOCOL => {}
        v => return Err(BadRequest::Version(v)),
    }
    let request = serde_json::from_str::<Message<Request>>(line).map(|m| m.body).map_err(|e| {
        let e = e.to_string();
        match e.contains("unknown variant") {
            true => BadRequest::Unknown(e.split(", expected").next().unwrap_or(&e).to_string()),
            false => BadRequest::Malformed(e),
        }
    })?;
    // `show` takes nothing: serde's check for unknown fields does not reach a unit variant
    // read through a flattened field, so its keys are checked here.
    if let Request::Show = request {
        if let Some(key) = object.keys().find(|k| *k != "version" && *k != "cmd") {
            return Err(BadRequest::Malformed(format!(
                "show takes no `{}`",
                pathem_model::units::shown(key)
            )));
        }
    }
    Ok(request)
}

/// The line of a reply (with the protocol's version).
fn reply_line(body: Reply) -> String {
    serde_json::to_string(&Message { version: PROTOCOL, body }).unwrap_or_default()
}

/// A listening control socket; removed when dropped.
pub struct Server {
    path: PathBuf,
    _thread: crate::ServerThread,
}

impl Server {
    /// Listens as `name`, answering from `served` on a thread of its own.
    pub fn start(served: Served) -> Result<Server, Error> {
        check_free(&served.name)?;
        fn fail(what: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
            move |source| Error::Io { what: format!("control socket {}", what.display()), source }
        }
        std::fs::create_dir_all(SOCKET_DIR).map_err(fail(Path::new(SOCKET_DIR)))?;
        let path = socket_path(&served.name);
        // Nobody answers there: a socket left by a pathem that was killed.
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(fail(&path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(fail(&path))?;
        listener.set_nonblocking(true).map_err(fail(&path))?;
        let thread = crate::ServerThread::spawn(
            "pathem-control",
            listener,
            |l| l.accept().map(|(s, _)| s),
            move |s| {
                let _ = answer(s, &served);
            },
        )?;
        Ok(Server { path, _thread: thread })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The longest request: a client cannot make the server hold more.
const REQUEST_LIMIT: usize = 64 << 10;

/// The request in what was read (at most [`REQUEST_LIMIT`] bytes): one that is not UTF-8 or
/// has no end within the limit is refused as such, a connection that failed is an error.
fn request_of(read: std::io::Result<String>) -> std::io::Result<Result<Request, BadRequest>> {
    Ok(match read {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(BadRequest::Malformed(e.to_string())),
        Err(e) => return Err(e),
        Ok(line) if line.len() >= REQUEST_LIMIT && !line.ends_with('\n') => {
            Err(BadRequest::Malformed("it is longer than 64 KiB, the most a request may be".into()))
        }
        Ok(line) => parse_request(&line),
    })
}

fn answer(stream: UnixStream, served: &Served) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(crate::CLIENT_TIME))?;
    let read = crate::read_request(&stream, |t| stream.set_read_timeout(Some(t)), REQUEST_LIMIT);
    let reply = match request_of(read)? {
        Ok(Request::Show) => Reply::State(Box::new(served.state())),
        Ok(Request::Set { args, cwd }) => match (served.setter)(&args, cwd.as_deref()) {
            Ok(()) => Reply::Changed,
            Err(e) => Reply::Refused { error: e.to_string(), usage: e.is_usage() },
        },
        Err(e) => Reply::Refused { error: e.to_string(), usage: true },
    };
    let mut w = &stream;
    writeln!(w, "{}", reply_line(reply))
}

/// How long `ctl set` waits for its answer: a change that grows delay lines touches every
/// page of the new ones first (at a few GB/s, a minute covers the largest this machine's memory
/// allows, and a slow machine has as long again).
pub const SET_WAIT: Duration = Duration::from_secs(120);

/// Sends one request to the link called `name` and returns its answer.
pub fn request(name: &str, req: Request) -> Result<Reply, Error> {
    check_name(name)?;
    let path = socket_path(name);
    let mut stream = UnixStream::connect(&path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            Error::NoSuchLink(name.into())
        }
        std::io::ErrorKind::PermissionDenied => {
            Error::Io { what: format!("{} (the socket is its owner's only)", path.display()), source }
        }
        _ => Error::Io { what: path.display().to_string(), source },
    })?;
    let wait = req.answer_within();
    stream.set_read_timeout(Some(wait)).ok();
    let req = serde_json::to_string(&Message { version: PROTOCOL, body: req })
        .map_err(|e| Error::Unsendable(format!("the request cannot be written as JSON: {e}")))?;
    writeln!(stream, "{req}").map_err(|source| Error::Io { what: path.display().to_string(), source })?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|source| {
            let what = match source.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                    "{name} did not answer within {} s (a change may still be taking effect; `pathem ctl {name} show` answers once it has)",
                    wait.as_secs()
                ),
                _ => format!("{name} did not answer"),
            };
            Error::Io { what, source }
        })?;
    if line.is_empty() {
        return Err(Error::Unreadable {
            name: name.into(),
            reason: "it closed the connection without answering".into(),
        });
    }
    match version_of(&line) {
        Ok(PROTOCOL) => serde_json::from_str::<Message<Reply>>(&line)
            .map(|m| m.body)
            .map_err(|e| Error::Unreadable { name: name.into(), reason: e.to_string() }),
        Ok(theirs) => Err(Error::Version { who: name.into(), theirs }),
        Err(e) => Err(Error::Unreadable { name: name.into(), reason: e.to_string() }),
    }
}

/// The names of the running links (whose sockets answer).
pub fn list() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(SOCKET_DIR) else { return Vec::new() };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock").map(str::to_string))
        .filter(|n| UnixStream::connect(socket_path(n)).is_ok())
        .collect();
    names.sort();
    names
}

/// A path's layer of `set`s.
#[derive(Clone)]
struct Layer {
    /// A `set --reset` made the layer the whole path.
    reset: bool,
    /// The flags the `set`s hold.
    flags: PathSpec,
}

/// Serves `link`'s control socket as `name`: `show` reads its counters; `set` parses the words
/// of `ctl set` ([`pathem_spec::change::Change`]) on top of each direction's current spec
/// (`specs`, what the link started with) and each named class's, checks every path it
/// changes, then changes all of them or none.
pub fn serve(
    link: &crate::Link,
    name: String,
    seed: u64,
    specs: [DirectionSpecs; 2],
) -> Result<Server, Error> {
    let (cab, cba) = link.path_controls();
    let controls = (cab.to_vec(), cba.map(<[Control]>::to_vec));
    let (kab, kba) = link.counters();
    let filters = |d: &DirectionSpecs| d.classes.iter().map(|c| c.1.clone()).collect::<Vec<_>>();
    let filters = (filters(&specs[0]), filters(&specs[1]));
    // What every `set` so far changed, path by path (direction, lane): the top layer, over
    // the start's flags and the schedule's steps alike, or in their place once a `set --reset`
    // dropped them (the flag).
    let held = std::sync::Mutex::new(std::collections::HashMap::<(usize, usize), Layer>::new());
    let attached = link.started.attached;
    let to = controls.clone();
    let setter: Setter = Box::new(move |words: &[String], cwd: Option<&Path>| {
        // File names are the client's: relative ones are taken from its directory.
        let here = |s: PathSpec| match cwd {
            Some(d) => s.relative_to(d),
            None => s,
        };
        let mut change = pathem_spec::change::Change::parse(words)?;
        (change.both, change.a_to_b, change.b_to_a) =
            (here(change.both), here(change.a_to_b), here(change.b_to_a));
        let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((egress, ingress)) = attached {
            let asks_egress =
                change.resets(0, true) || change.both != PathSpec::default() || change.asks_own(0);
            if !ingress && change.asks_own(1) {
                return Err(Refusal::NotAttached("ingress"));
            }
            if !egress && asks_egress {
                return Err(Refusal::NotAttached("egress"));
            }
        }
        // A one-way link has no b -> a path: words for it alone would change nothing.
        if to.1.is_none() && change.asks_own(1) {
            return Err(Refusal::OneWay);
        }
        let over = |d: usize, lane: usize| held.get(&(d, lane)).map(|h| h.flags.clone()).unwrap_or_default();
        let reset_before = |d: usize, lane: usize| held.get(&(d, lane)).is_some_and(|h| h.reset);
        let (ab, ba) = change.apply(&(over(0, 0), over(1, 0)), attached.is_some());
        // Every path that changes, with what all changes so far hold for it. A default path
        // the words leave alone (they name only classes) is not set again; a class named
        // twice takes both.
        let asks = |s: &PathSpec| s.without_classes() != PathSpec::default();
        let both = change.reset || asks(&change.both);
        let mut plan: Vec<((usize, usize), Layer)> = Vec::new();
        for (d, spec, own) in [(0, ab, &change.a_to_b), (1, ba, &change.b_to_a)] {
            if asks(own) || change.reset_own[d] || (both && (d == 0 || attached.is_none())) {
                let reset = change.resets(d, attached.is_some()) || reset_before(d, 0);
                plan.push(((d, 0), Layer { reset, flags: spec }));
            }
        }
        for (name, flags, dirs) in change.classes(attached.is_some())? {
            let flags = here(flags);
            let mut found = false;
            for &d in dirs {
                if let Some(i) = specs[d].classes.iter().position(|c| c.0 == name) {
                    let key = (d, i + 1);
                    match plan.iter_mut().find(|p| p.0 == key) {
                        Some(p) => p.1.flags = p.1.flags.overridden_by(&flags),
                        None => {
                            let flags = over(d, i + 1).overridden_by(&flags);
                            plan.push((key, Layer { reset: reset_before(d, i + 1), flags }))
                        }
                    }
                    found = true;
                }
            }
            if !found {
                if name == pathem_engine::DEFAULT_CLASS {
                    return Err(Refusal::DefaultClass);
                }
                // The classes of the directions asked, each once.
                let mut known: Vec<&str> = Vec::new();
                for c in dirs.iter().flat_map(|&d| specs[d].classes.iter()) {
                    if !known.contains(&c.0.as_str()) {
                        known.push(&c.0);
                    }
                }
                let mut known = if known.is_empty() { "none".into() } else { known.join(", ") };
                if (0..2).any(|d| !dirs.contains(&d) && specs[d].classes.iter().any(|c| c.0 == name)) {
                    known.push_str(&format!("; {name} is a class of the other direction"));
                }
                return Err(Refusal::NoClass { name, known });
            }
        }
        // Each path as the change leaves it: the start's flags with what is held on top, and
        // each schedule step the same way, so the change holds when later steps fall due.
        // (Each trace file read once for all of them: a schedule's steps name the same ones.)
        let made = pathem_spec::path::reading_each_file_once(|| -> Result<Vec<_>, Refusal> {
            let mut made = Vec::new();
            for ((d, lane), Layer { reset, flags: held }) in &plan {
                let (start, steps) = specs[*d].lane(*lane);
                // After a reset, the held layer is the whole path, at every step too.
                let under = |s: &PathSpec| if *reset { PathSpec::default() } else { s.clone() };
                let config = under(start).overridden_by(held).to_config()?;
                let steps: Vec<_> = steps
                    .iter()
                    .map(|s| under(s).overridden_by(held).to_config())
                    .collect::<Result<_, _>>()?;
                made.push((*d, *lane, config, steps));
            }
            Ok(made)
        })?;
        let control = |d: usize, lane: usize| match d {
            0 => to.0.get(lane),
            _ => to.1.as_ref().and_then(|c| c.get(lane)),
        };
        // All or nothing: every path's change checked and its delay line made before any is
        // sent (a line that cannot be made leaves every path as it was). The new lines are
        // made while the old ones still hold their frames: all of them must fit at once.
        let held_now = to.0.iter().chain(to.1.iter().flatten()).map(Control::line_bytes);
        let new = made
            .iter()
            .map(|(d, lane, cfg, steps)| control(*d, *lane).map_or(0, |c| c.new_line_bytes(cfg, steps)));
        if new.clone().any(|b| b > 0) {
            let all = held_now.chain(new).fold(0usize, usize::saturating_add);
            pathem_engine::delay_line::can_touch_all(all).map_err(pathem_engine::ChangeError::from)?;
        }
        let mut ready = Vec::new();
        for ((d, lane, cfg, steps), (key, spec)) in made.into_iter().zip(plan.iter().cloned()) {
            let prepared = match control(d, lane) {
                Some(c) => Some(c.prepare(cfg, (!steps.is_empty()).then_some(steps))?),
                None => None,
            };
            ready.push((key, spec, prepared));
        }
        // Each path's layer is kept as its change commits: should a later one fail (its link
        // stopped), the next `set` still builds on what the earlier ones now run.
        for (key, spec, prepared) in ready {
            if let Some(change) = prepared {
                change.commit()?;
            }
            held.insert(key, spec);
        }
        // `set` answers once the change is in effect, so a `show` right after sees it.
        let limit = std::time::Duration::from_secs(1);
        let done = plan.iter().all(|((d, lane), _)| control(*d, *lane).is_none_or(|c| c.taken(limit)));
        if !done {
            return Err(Refusal::NotApplied);
        }
        Ok(())
    });
    Server::start(Served {
        name,
        seed,
        port_a: link.started.name_a.clone(),
        port_b: link.started.name_b.clone(),
        how: (link.started.how_a.clone(), link.started.how_b.clone()),
        controls,
        counters: (kab.clone(), kba.cloned()),
        filters,
        setter,
        since: link.since,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default path is named as such, a class with the empty filter as taking every frame.
    #[test]
    fn a_heading_tells_the_default_path_from_a_class_of_every_frame() {
        let state = |class: &str, filter: &str| ClassState {
            class: class.into(),
            filter: filter.into(),
            path: "delay 1ms".into(),
            stats: pathem_engine::Stats::default(),
        };
        assert_eq!(state("default", "").heading(), "class default (frames no class takes): delay 1ms");
        assert_eq!(state("class1", "").heading(), "class class1 (\"\": every frame): delay 1ms");
        assert_eq!(state("web", "tcp port 80").heading(), "class web (\"tcp port 80\"): delay 1ms");
    }

    #[test]
    fn requests_are_typed_and_versioned() {
        let set = Request::Set { args: vec!["--delay".into(), "5ms".into()], cwd: None };
        let line = serde_json::to_string(&Message { version: PROTOCOL, body: set.clone() }).unwrap();
        assert_eq!(line, r#"{"version":1,"cmd":"set","args":["--delay","5ms"]}"#);
        assert_eq!(parse_request(&line), Ok(set));
        // A newer client says where it runs (relative file names are its own).
        assert_eq!(
            parse_request(r#"{"version":1,"cmd":"set","args":["--delay","5ms"],"cwd":"/home/u"}"#),
            Ok(Request::Set { args: vec!["--delay".into(), "5ms".into()], cwd: Some("/home/u".into()) })
        );
        assert_eq!(parse_request(r#"{"version":1,"cmd":"show"}"#), Ok(Request::Show));
        // An older client (no version) and a newer one are told which versions meet.
        assert_eq!(parse_request(r#"{"cmd":"show"}"#), Err(BadRequest::Version(0)));
        for extra in [r#","args":[]"#, r#","extra":1"#] {
            let line = format!(r#"{{"version":1,"cmd":"show"{extra}}}"#);
            assert!(parse_request(&line).unwrap_err().to_string().contains("show takes no"), "{line}");
        }
        assert_eq!(parse_request(r#"{"version":1,"cmd":"show"}"#), Ok(Request::Show));
        // Too long, also when the cut falls inside a character.
        for (pad, c) in [("", "x"), ("", "é"), ("x", "é")] {
            let long = format!(r#"{{"version":1,"cmd":"set","args":["{pad}{}"]}}"#, c.repeat(REQUEST_LIMIT));
            let read = crate::read_request(long.as_bytes(), |_| Ok(()), REQUEST_LIMIT);
            let e = request_of(read).unwrap().unwrap_err().to_string();
            assert!(e.contains("longer than 64 KiB"), "{pad}{c}: {e}");
        }
        let read =
            crate::read_request(&b"{\"version\":1,\"cmd\":\"sh\xffow\"}\n"[..], |_| Ok(()), REQUEST_LIMIT);
        assert!(request_of(read).unwrap().unwrap_err().to_string().contains("not UTF-8"));
        let e = parse_request(r#"{"cmd":"show"}"#).unwrap_err().to_string();
        assert!(e.contains("control protocol 0") && e.contains("this pathem 1"), "{e}");
        let e = parse_request(r#"{"version":7,"cmd":"show"}"#).unwrap_err().to_string();
        assert!(e.contains("control protocol 7"), "{e}");
        let e = parse_request(r#"{"version":1,"cmd":"frobnicate"}"#).unwrap_err().to_string();
        assert!(e.contains("frobnicate") && e.contains("accepted: show, set"), "{e}");
        assert_eq!(parse_request("not json"), Err(BadRequest::NotJson));
        assert!(matches!(parse_request(r#"{"version":1,"cmd":"set"}"#), Err(BadRequest::Malformed(_))));
    }

    #[test]
    fn a_change_is_waited_for_longer_than_a_show() {
        assert_eq!(Request::Show.answer_within(), Duration::from_secs(5));
        let set = Request::Set { args: vec!["--delay".into(), "5ms".into()], cwd: None };
        // Touching a 16 GiB line at 1 GB/s takes 16 s; a change gets far longer than that.
        assert!(set.answer_within() >= Duration::from_secs(60), "{:?}", set.answer_within());
    }

    #[test]
    fn replies_round_trip() {
        let line = reply_line(Reply::Refused { error: "--loss 150%: above 100%".into(), usage: true });
        assert_eq!(version_of(&line), Ok(PROTOCOL));
        match serde_json::from_str::<Message<Reply>>(&line).unwrap().body {
            Reply::Refused { error, usage } => {
                assert_eq!((error.as_str(), usage), ("--loss 150%: above 100%", true))
            }
            other => panic!("{other:?}"),
        }
        let stopped = Refusal::Change(pathem_engine::ChangeError::Stopped);
        assert!(!stopped.is_usage() && !Refusal::NotApplied.is_usage() && Refusal::OneWay.is_usage());
        // An older pathem's refusal, without `usage`, is a usage refusal, as all were.
        let old = r#"{"version":1,"reply":"refused","error":"x"}"#;
        assert!(matches!(
            serde_json::from_str::<Message<Reply>>(old).unwrap().body,
            Reply::Refused { usage: true, .. }
        ));
        // Versions that are not whole numbers are refused as such, not taken as another one.
        for (line, says) in [
            (r#"{"version":"1","cmd":"show"}"#, "its version is \"1\", not a whole number"),
            (r#"{"version":1.5,"cmd":"show"}"#, "its version is 1.5"),
            (r#"[1]"#, "a JSON object per line"),
            ("", "a JSON object per line"),
        ] {
            assert!(parse_request(line).unwrap_err().to_string().contains(says), "{line}");
        }
        assert_eq!(parse_request(r#"{"cmd":"show"}"#), Err(BadRequest::Version(0)));
        assert!(matches!(
            serde_json::from_str::<Message<Reply>>(&reply_line(Reply::Changed)).unwrap().body,
            Reply::Changed
        ));
    }
}
