//! A monotonic clock where the platform has one. `wasm32-unknown-unknown`
//! (the browser build) has none without JavaScript glue: there every reading
//! is zero, the selftest reports no duration, and the plan, unable to measure,
//! prefers the most specific proven tier (the page times calls from JS).

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub(crate) use std::time::Instant;

/// Whether [`Instant`] measures anything on this platform.
pub(crate) const AVAILABLE: bool = !cfg!(all(target_arch = "wasm32", target_os = "unknown"));

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
#[derive(Clone, Copy)]
pub(crate) struct Instant;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
impl Instant {
    pub(crate) fn now() -> Self {
        Instant
    }
    pub(crate) fn elapsed(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
