//! The open-loop schedule: when each transaction is meant to start, and a
//! precise sleep until then.

use super::config::Schedule;
use crate::random::Prng;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The run's phases on the Instant clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub start: Instant,
    pub measure_from: Instant,
    pub end: Option<Instant>,
}

/// The gap to the next scheduled start of one thread.
fn gap_s(schedule: Schedule, mean_s: f64, rng: &mut Prng) -> f64 {
    match schedule {
        Schedule::Poisson => rng.exponential_gap(mean_s),
        Schedule::Constant => mean_s,
    }
}

/// The thread's next scheduled start under a rate (pgbench's throttle): one
/// gap after the previous slot. With a latency limit, slots that are already
/// more than the limit behind `now` are skipped, as pgbench -L does; returns
/// the slot and how many measured slots were skipped.
pub(crate) fn next_scheduled_start(
    schedule: Schedule,
    previous: Instant,
    gap_mean_s: f64,
    rng: &mut Prng,
    now: Instant,
    latency_limit: Option<Duration>,
    timing: Timing,
) -> (Instant, u64) {
    let mut slot = previous + Duration::from_secs_f64(gap_s(schedule, gap_mean_s, rng));
    let mut skipped = 0;
    if let Some(limit) = latency_limit {
        while slot + limit < now && timing.end.is_none_or(|end| slot < end) {
            if slot >= timing.measure_from {
                skipped += 1;
            }
            slot += Duration::from_secs_f64(gap_s(schedule, gap_mean_s, rng));
        }
    }
    (slot, skipped)
}

/// A client's wake-up clock for scheduled starts: a timerfd on CLOCK_MONOTONIC.
///
/// tokio's timer wakes on whole milliseconds (epoll_wait's timeout), which put
/// 0.5-1 ms of schedule lag, and so of latency from the intended start, on
/// every open-loop transaction (measured: mean lag 1.17 ms at 500 tx/s on an
/// idle server). A timerfd armed at the absolute deadline wakes within the
/// kernel's timer slack (50 µs by default), as pgbench's ppoll timeout does.
pub(crate) struct ScheduleTimer {
    fd: AsyncFd<OwnedFd>,
}

impl ScheduleTimer {
    pub fn new() -> std::io::Result<ScheduleTimer> {
        let owned = crate::sys::timerfd_monotonic()?;
        let fd = crate::sys::watch(owned, Interest::READABLE)?;
        Ok(ScheduleTimer { fd })
    }

    /// Wait until CLOCK_MONOTONIC reaches `deadline_ns`.
    pub async fn wait_until_ns(&self, deadline_ns: u64) -> std::io::Result<()> {
        crate::sys::timerfd_arm_at(self.fd.get_ref().as_raw_fd(), deadline_ns)?;
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|inner| crate::sys::read_counter(inner.get_ref().as_raw_fd())) {
                Ok(result) => return result.map(|_| ()),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing_from(start: Instant) -> Timing {
        Timing {
            start,
            measure_from: start,
            end: None,
        }
    }

    #[test]
    fn poisson_gaps_average_the_requested_rate() {
        let start = Instant::now();
        let mut rng = Prng::seeded(11);
        let mut slot = start;
        let n = 50_000;
        for _ in 0..n {
            // A client that is never late: `now` is the slot itself.
            let (next, skipped) = next_scheduled_start(
                Schedule::Poisson,
                slot,
                0.001,
                &mut rng,
                slot,
                None,
                timing_from(start),
            );
            assert_eq!(skipped, 0);
            assert!(next >= slot);
            slot = next;
        }
        let mean_gap_s = (slot - start).as_secs_f64() / n as f64;
        // 1000 tx/s: mean gap 1 ms; standard error 1 ms / sqrt(n) = 4.5 µs.
        assert!(
            (mean_gap_s - 0.001).abs() < 0.00003,
            "mean gap {mean_gap_s}"
        );
    }

    #[test]
    fn the_schedule_timer_wakes_at_each_deadline_never_before() {
        // The mechanism of a small lag: an absolute deadline on the clock the
        // harness reads. How late it wakes is the machine's (a benchmark's
        // figure: benchmarks/open_loop_lag.py), never early.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        runtime.block_on(async {
            let timer = ScheduleTimer::new().unwrap();
            let mut deadline = crate::sys::monotonic_ns();
            for _ in 0..20 {
                deadline += 1_000_000;
                timer.wait_until_ns(deadline).await.unwrap();
                assert!(crate::sys::monotonic_ns() >= deadline);
            }
            // A deadline already past returns at once rather than never.
            timer.wait_until_ns(deadline).await.unwrap();
        });
    }

    #[test]
    fn constant_gaps_are_equal() {
        let start = Instant::now();
        let mut rng = Prng::seeded(3);
        let (a, _) = next_scheduled_start(
            Schedule::Constant,
            start,
            0.002,
            &mut rng,
            start,
            None,
            timing_from(start),
        );
        let (b, _) = next_scheduled_start(
            Schedule::Constant,
            a,
            0.002,
            &mut rng,
            a,
            None,
            timing_from(start),
        );
        assert_eq!(a - start, Duration::from_millis(2));
        assert_eq!(b - a, Duration::from_millis(2));
    }

    #[test]
    fn slots_later_than_the_latency_limit_are_skipped() {
        let start = Instant::now();
        let mut rng = Prng::seeded(5);
        // The client comes back 2 s late at 1000 tx/s with a 100 ms limit:
        // about 1900 slots are hopeless and skipped.
        let now = start + Duration::from_secs(2);
        let limit = Duration::from_millis(100);
        let (slot, skipped) = next_scheduled_start(
            Schedule::Poisson,
            start,
            0.001,
            &mut rng,
            now,
            Some(limit),
            timing_from(start),
        );
        assert!(slot + limit >= now, "the slot taken is within the limit");
        assert!((1700..2100).contains(&skipped), "skipped {skipped}");
        // Without a limit nothing is skipped: latency shows the stall instead.
        let (slot, skipped) = next_scheduled_start(
            Schedule::Poisson,
            start,
            0.001,
            &mut rng,
            now,
            None,
            timing_from(start),
        );
        assert_eq!(skipped, 0);
        assert!(slot < start + Duration::from_millis(50));
    }
}
