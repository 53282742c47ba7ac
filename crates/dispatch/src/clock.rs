//! A monotonic clock. Natively it is std's `Instant`. `wasm32-unknown-unknown`
//! (the browser build) has no clock without JavaScript: there the host
//! gives one with [`set_clock`] (the page passes `performance.now()`),
//! and until it does every reading is zero, the selftest reports no
//! duration, and the plan, unable to measure, prefers the most specific
//! proven tier.

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub(crate) use std::time::Instant;

/// Gives a platform without std's clock a monotonic clock: `now_ms` returns
/// milliseconds from any fixed origin, never decreasing (the browser page
/// passes `performance.now()`, whose resolution is 5 µs in a cross-origin
/// isolated page and 100 µs otherwise). Call it before the first layer,
/// [`crate::selftest_for`] or [`crate::autotuned_plan`]: the plan is
/// decided once, by the clock there is then.
///
/// Returns whether the clock is used: `true` on `wasm32-unknown-unknown`
/// for the first clock given (a later one is ignored, so the plan and the
/// selftest read one clock), `false` on every other target, where std's
/// clock is used.
pub fn set_clock(now_ms: fn() -> f64) -> bool {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    {
        HOST_CLOCK.set(now_ms).is_ok()
    }
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    {
        let _ = now_ms;
        false
    }
}

/// Whether [`Instant`] measures anything here.
pub(crate) fn available() -> bool {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    {
        HOST_CLOCK.get().is_some()
    }
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    {
        true
    }
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
static HOST_CLOCK: std::sync::OnceLock<fn() -> f64> = std::sync::OnceLock::new();

/// A reading of the host's clock ([`set_clock`]), in ms; 0 without one.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
#[derive(Clone, Copy)]
pub(crate) struct Instant(f64);

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
impl Instant {
    pub(crate) fn now() -> Self {
        Instant(HOST_CLOCK.get().map_or(0.0, |now| now()))
    }
    pub(crate) fn elapsed(&self) -> std::time::Duration {
        let ms = Instant::now().0 - self.0;
        // a host clock that steps back, or is not finite, reads as no time
        if ms.is_finite() && ms > 0.0 {
            std::time::Duration::from_secs_f64(ms / 1e3)
        } else {
            std::time::Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_clock_is_taken_only_where_std_has_none() {
        // natively std's clock is kept: the host's is refused, and readings
        // still move
        assert_eq!(
            set_clock(|| 1.0),
            cfg!(all(target_arch = "wasm32", target_os = "unknown"))
        );
        assert!(available());
        // Spin rather than sleep: under Node's WASI a sleep may return
        // before its time (CI once read less than the 2 ms it slept), and
        // what this test asks is only that readings move.
        let start = Instant::now();
        let mut spins = 0u64;
        while start.elapsed().is_zero() {
            spins += 1;
            assert!(spins < 1 << 32, "the clock never moved");
            std::hint::spin_loop();
        }
        assert!(start.elapsed() > std::time::Duration::ZERO);
    }
}
