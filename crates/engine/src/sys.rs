//! Every libc call of the engine, in one place (as hyperfine keeps its in
//! `src/timer/`): clocks, timerfd, eventfd, shutdown, socket options, epoll,
//! network namespaces, and handing an fd to tokio's reactor. The rest of the
//! engine calls these safe wrappers and never touches libc itself (its
//! constants and types aside); the io_uring crate's own unsafe API (queue
//! pushes whose buffers must outlive the kernel's use) stays in `uring.rs`,
//! where that lifetime is managed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A value that owns its file descriptor outright: the fd stays open and the
/// same for as long as the value lives, and `as_raw_fd` always returns it.
/// That is what tokio's reactor requires of what it watches.
///
/// # Safety
/// Implement only for types that own their fd and never swap it.
pub unsafe trait OwnsFd: AsRawFd {}

// SAFETY: an OwnedFd closes its fd only on drop and never changes it.
unsafe impl OwnsFd for OwnedFd {}
// SAFETY: std's streams own their socket fd for their whole life.
unsafe impl OwnsFd for std::net::TcpStream {}
// SAFETY: as above.
unsafe impl OwnsFd for std::os::unix::net::UnixStream {}

/// Register `inner` with the current tokio runtime's reactor for `interest`.
/// Must run inside a runtime with IO enabled.
pub fn watch<T: OwnsFd>(inner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: OwnsFd guarantees the fd stays open and unchanged for as long
    // as `inner` lives, which is as long as the AsyncFd owns it.
    unsafe { AsyncFd::register_with_interest(inner, interest) }.map_err(|e| e.into_parts().1)
}

fn clock_gettime(clock: libc::clockid_t) -> Option<libc::timespec> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then_some(ts)
}

/// A CPU (or other) clock's reading in seconds; None when the clock is gone
/// (the CPU clock of a thread that ended).
pub fn clock_s(clock: libc::clockid_t) -> Option<f64> {
    clock_gettime(clock).map(|ts| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

/// CPU time of the calling thread, in seconds.
pub fn thread_cpu_s() -> Option<f64> {
    clock_s(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (every thread, Python's too), in seconds.
pub fn process_cpu_s() -> Option<f64> {
    clock_s(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The CPUs this thread may run on (its affinity mask: a cpuset or taskset
/// narrows it), in ascending order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array, valid all zeroes; the kernel
    // writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the pointer and size describe `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads bit `cpu` of `set`, cpu < the set's bits.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Run this thread on `cpu` only.
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    // SAFETY: as in allowed_cpus.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes bit `cpu` of `set`; the caller's cpu came from
    // allowed_cpus, so it is below the set's bits.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is this thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU a process (or thread: /proc also answers to a thread id) last
/// ran on: field 39 (`processor`) of /proc/PID/stat. None when it has gone
/// or the file cannot be read or parsed.
pub fn last_cpu(pid: u32) -> Option<usize> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_processor(&stat)
}

/// A process's command name (/proc/PID/comm: its executable's name, at
/// most 15 bytes), None when it has gone or cannot be read.
pub fn process_comm(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_string())
}

/// `processor` from the text of a /proc/PID/stat: the fields after the
/// command name, which is in parentheses and may itself hold spaces and
/// parentheses, start at field 3 (state), so field 39 is the 37th of them.
fn parse_stat_processor(stat: &str) -> Option<usize> {
    let (_, after) = stat.rsplit_once(')')?;
    after
        .split_whitespace()
        .nth(39 - 3)
        .and_then(|f| f.parse().ok())
}

/// CLOCK_MONOTONIC in ns: the clock of a run's `t0_ns` and of Python's
/// time.monotonic_ns().
pub fn monotonic_ns() -> u64 {
    let ts = clock_gettime(libc::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC always exists");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's CPU clock, which another thread may read (the
/// coordinator reads each worker's at the start of the measured window).
pub fn thread_cpu_clock() -> Option<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self() is the calling thread; `clock` is a valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    (rc == 0).then_some(clock)
}

/// A non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC.
pub fn timerfd_monotonic() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant flags; the result is checked.
    let raw = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Arm a timerfd to expire once, at `deadline_ns` on CLOCK_MONOTONIC.
pub fn timerfd_arm_at(fd: RawFd, deadline_ns: u64) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: `spec` is a valid itimerspec; the old value is not wanted (null).
    let rc =
        unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Read (and so clear) a timerfd's or eventfd's 8-byte counter; WouldBlock
/// when it has not fired.
pub fn read_counter(fd: RawFd) -> io::Result<u64> {
    let mut counter = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a local 8-byte buffer.
    let n = unsafe { libc::read(fd, counter.as_mut_ptr().cast(), counter.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(counter))
}

/// A non-blocking, close-on-exec eventfd (io_uring posts completions to it).
pub fn eventfd_nonblocking() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant flags; the result is checked.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Shut a socket down both ways, so that a client blocked on it (in epoll or
/// in an io_uring receive) returns at once. Errors are ignored: the socket
/// may already be closed by its peer.
pub fn shutdown_socket(fd: RawFd) {
    // SAFETY: shutdown(2) on an fd only changes that socket's state; callers
    // pass fds of sockets still owned by live clients.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// Make `target`'s fd number refer to `source`'s socket, closing what it
/// referred to, in one step (dup3, close-on-exec): a client that reconnects
/// keeps its fd number, the one the harness shuts down on an abort.
pub fn dup_onto(source: &impl AsRawFd, target: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: both fds are open and owned by the callers' values for the
    // whole call; dup3 swaps what `target`'s number refers to atomically, so
    // no other thread can be handed that number in between, and `target`'s
    // owner goes on owning (and later closing) it.
    let rc = unsafe { libc::dup3(source.as_raw_fd(), target.as_raw_fd(), libc::O_CLOEXEC) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Move the calling thread (only it) into the network namespace `ns`, an
/// open /run/netns/NAME or /proc/PID/ns/net.
pub fn enter_netns(ns: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: setns(2) with an fd the caller keeps open for the call; it
    // moves only the calling thread.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// setsockopt(2) of an int option.
fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: i32) -> io::Result<()> {
    let value = value as libc::c_int;
    // SAFETY: `value` is a live c_int for the call, and the length given is
    // its size; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A TCP socket's maximum segment size (TCP_MAXSEG), set before it connects.
pub fn set_tcp_maxseg(fd: RawFd, mss: u32) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, mss as i32)
}

/// A socket's receive buffer: SO_RCVBUFFORCE (past net.core.rmem_max; needs
/// CAP_NET_ADMIN) when `force`, else SO_RCVBUF.
pub fn set_rcvbuf(fd: RawFd, bytes: i32, force: bool) -> io::Result<()> {
    let name = if force {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_RCVBUF
    };
    set_int_option(fd, libc::SOL_SOCKET, name, bytes)
}

/// getsockopt(2) of an option that the kernel fills into a `T`; None when
/// it cannot be read.
///
/// # Safety
/// `T` must be the option's C struct, made only of integers, for which all
/// zeroes is a valid value.
unsafe fn get_option<T>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<T> {
    // SAFETY: the caller vouches that all zeroes is a valid T.
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is writable for `len` bytes and `len` is a valid
    // in/out pointer; the kernel writes at most `len` bytes.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut T).cast(), &mut len) };
    (rc == 0).then_some(value)
}

/// tcpi_total_retrans of a TCP socket (TCP_INFO); None when it cannot be read.
pub fn tcp_total_retrans(fd: RawFd) -> Option<u32> {
    // SAFETY: tcp_info is plain integers.
    let info: libc::tcp_info = unsafe { get_option(fd, libc::IPPROTO_TCP, libc::TCP_INFO) }?;
    Some(info.tcpi_total_retrans)
}

/// The process at the other end of a connected unix socket (SO_PEERCRED:
/// the server that listened, as this machine's pid namespace names it).
/// None for a socket of another family, a peer this namespace cannot see
/// (pid 0), or an error.
pub fn unix_peer_pid(fd: RawFd) -> Option<u32> {
    // SAFETY: ucred is plain integers.
    let cred: libc::ucred = unsafe { get_option(fd, libc::SOL_SOCKET, libc::SO_PEERCRED) }?;
    (cred.pid > 0).then_some(cred.pid as u32)
}

/// Each thread of process `pid` with the number of times it has been put on
/// a CPU (the third field of /proc/PID/task/TID/schedstat, `pcount`). None
/// when the process has gone or the kernel keeps no schedstat.
pub fn thread_run_counts(pid: u32) -> Option<Vec<(u32, u64)>> {
    let mut counts = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Some(tid) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<u32>().ok())
        else {
            continue;
        };
        // A thread that ended between the listing and the read is skipped.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")) {
            counts.push((tid, text.split_whitespace().nth(2)?.parse().ok()?));
        }
    }
    (!counts.is_empty()).then_some(counts)
}

/// The one thread that was put on a CPU at least `at_least` times more in
/// `after` than in `before` (a thread new in `after` counts from 0); None
/// when no thread or more than one did.
pub fn the_thread_that_ran(
    before: &[(u32, u64)],
    after: &[(u32, u64)],
    at_least: u64,
) -> Option<u32> {
    let mut ran = after.iter().filter(|(tid, n)| {
        let was = before.iter().find(|(t, _)| t == tid).map_or(0, |&(_, n)| n);
        n.saturating_sub(was) >= at_least
    });
    match (ran.next(), ran.next()) {
        (Some(&(tid, _)), None) => Some(tid),
        _ => None,
    }
}

/// One event of `Epoll::wait`: `events` (EPOLLIN, ...) and the token given
/// to `Epoll::add` (in its `u64`).
pub type EpollEvent = libc::epoll_event;

/// An epoll instance (close-on-exec), closed on drop.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall with a constant flag; the result is checked.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    /// Watch `fd` for input (level-triggered); its events carry `token`.
    pub fn add_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: the epoll fd is open while `self` lives; `ev` is a valid
        // event the kernel copies during the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait up to `timeout_ms` for events into `events`; how many arrived
    /// (0 on timeout; Interrupted when a signal came first).
    pub fn wait(&self, events: &mut [EpollEvent], timeout_ms: i32) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: the epoll fd is open while `self` lives, and `events` is
        // writable for the `max` entries the kernel may fill.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn processor_is_field_39_even_when_the_command_name_holds_spaces_and_parentheses() {
        let mut fields: Vec<String> = (3..=52).map(|n| format!("{}", n * 10)).collect();
        fields[0] = "S".into();
        let stat = format!("4242 (a (b) c) {}\n", fields.join(" "));
        assert_eq!(parse_stat_processor(&stat), Some(390));
        assert_eq!(parse_stat_processor("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat_processor("no parenthesis"), None);
    }

    #[test]
    fn a_thread_pinned_to_a_cpu_is_last_seen_on_it() {
        let cpus = allowed_cpus().unwrap();
        let cpu = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_this_thread(cpu).unwrap();
            // SAFETY: gettid has no arguments and cannot fail.
            let tid = unsafe { libc::gettid() } as u32;
            // Run a little on the CPU so /proc has seen it there.
            let mut x = 0u64;
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            last_cpu(tid)
        })
        .join()
        .unwrap();
        assert_eq!(seen, Some(cpu));
        assert_eq!(last_cpu(u32::MAX), None);
    }

    #[test]
    fn a_unix_socket_names_its_peer_and_a_tcp_socket_does_not() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(unix_peer_pid(a.as_raw_fd()), Some(std::process::id()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(unix_peer_pid(tcp.as_raw_fd()), None);
    }

    #[test]
    fn a_process_woken_for_each_message_is_the_thread_that_ran() {
        use std::io::{BufRead, Write};
        // cat wakes once per line it is sent, and answers it.
        let mut cat = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = cat.id();
        let mut input = cat.stdin.take().unwrap();
        let mut output = std::io::BufReader::new(cat.stdout.take().unwrap());
        let mut line = String::new();
        let mut round_trip = |line: &mut String| {
            input.write_all(b"x\n").unwrap();
            input.flush().unwrap();
            line.clear();
            output.read_line(line).unwrap();
        };
        round_trip(&mut line);
        let before = thread_run_counts(pid).unwrap();
        assert_eq!(before.len(), 1);
        for _ in 0..8 {
            round_trip(&mut line);
        }
        let after = thread_run_counts(pid).unwrap();
        // At least half: a line that comes before cat sleeps again wakes
        // nothing (find_server_thread asks as much of a server thread).
        assert_eq!(the_thread_that_ran(&before, &after, 4), Some(pid));
        assert_eq!(the_thread_that_ran(&before, &before, 1), None);
        cat.kill().unwrap();
        cat.wait().unwrap();
        assert_eq!(thread_run_counts(pid), None);
    }

    #[test]
    fn the_thread_that_ran_must_be_the_only_one() {
        let before = [(1, 5), (2, 0)];
        assert_eq!(the_thread_that_ran(&before, &[(1, 13), (2, 2)], 8), Some(1));
        assert_eq!(the_thread_that_ran(&before, &[(1, 13), (2, 8)], 8), None);
        assert_eq!(the_thread_that_ran(&before, &[(1, 12), (2, 7)], 8), None);
        // a thread that came after the first look counts from 0
        assert_eq!(
            the_thread_that_ran(&before, &[(1, 5), (2, 0), (3, 9)], 8),
            Some(3)
        );
        assert_eq!(thread_run_counts(u32::MAX), None);
    }

    #[test]
    fn a_process_comm_is_its_executables_name() {
        use std::io::{BufRead, Write};
        // spawn may return before exec has renamed the child; a line cat
        // has answered shows that cat is running.
        let mut cat = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = cat.stdin.take().unwrap();
        input.write_all(b"x\n").unwrap();
        input.flush().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(cat.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(process_comm(cat.id()).as_deref(), Some("cat"));
        cat.kill().unwrap();
        cat.wait().unwrap();
        assert_eq!(process_comm(cat.id()), None);
    }

    #[test]
    fn monotonic_ns_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }

    #[test]
    fn a_timerfd_armed_in_the_past_fires_once() {
        let fd = timerfd_monotonic().unwrap();
        assert_eq!(
            read_counter(fd.as_raw_fd()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        timerfd_arm_at(fd.as_raw_fd(), monotonic_ns()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(read_counter(fd.as_raw_fd()).unwrap(), 1);
    }

    #[test]
    fn epoll_reports_a_readable_socket_with_its_token() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_rcvbuf(rx.as_raw_fd(), 1 << 20, false).unwrap();
        let ep = Epoll::new().unwrap();
        ep.add_readable(rx.as_raw_fd(), 42).unwrap();
        let mut events = [EpollEvent { events: 0, u64: 0 }; 4];
        assert_eq!(ep.wait(&mut events, 0).unwrap(), 0);
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert_eq!(ep.wait(&mut events, 5_000).unwrap(), 1);
        let token = events[0].u64;
        assert_eq!(token, 42);
    }

    #[test]
    fn tcp_info_reads_a_connected_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(tcp_total_retrans(client.as_raw_fd()), Some(0));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(tcp_total_retrans(udp.as_raw_fd()), None);
    }

    #[test]
    fn thread_cpu_clock_reads_this_threads_time() {
        let clock = thread_cpu_clock().unwrap();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(clock_s(clock).unwrap() > 0.0);
        assert!(thread_cpu_s().unwrap() > 0.0);
        assert!(process_cpu_s().unwrap() > 0.0);
    }
}
