//! The same-run read probes every "% of bw" figure divides by: DRAM (a
//! 1 GiB buffer, four streams a thread) and a cache-resident buffer, and
//! how many bytes of weights make the cold mode cold.

use std::time::Instant;

use crate::median;

/// At least 256 MiB of distinct weights for the cold mode, and at least twice
/// the last-level cache where the OS reports it (a 480 MiB L3 would hold a
/// 256 MiB set and make "cold" warm).
pub(crate) fn cold_bytes() -> usize {
    let l3 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            let (num, mult) = match s.strip_suffix('K') {
                Some(n) => (n, 1usize << 10),
                None => (s.strip_suffix('M').unwrap_or(s), 1 << 20),
            };
            num.parse::<usize>().ok().map(|n| n * mult)
        });
    (256usize << 20).max(2 * l3.unwrap_or(0))
}

/// Reads `part` as 4 interleaved streams (its quarters, side by side) and
/// returns their wrapping sum, so that no read can be skipped.
pub(crate) fn read_four_streams(part: &[u64]) -> u64 {
    let q = part.len() / 4;
    let (a, rest) = part.split_at(q);
    let (b, rest) = rest.split_at(q);
    let (c, d) = rest.split_at(q);
    let mut s = [0u64; 4];
    for i in 0..q {
        s[0] = s[0].wrapping_add(a[i]);
        s[1] = s[1].wrapping_add(b[i]);
        s[2] = s[2].wrapping_add(c[i]);
        s[3] = s[3].wrapping_add(d[i]);
    }
    s.iter().fold(0u64, |x, y| x.wrapping_add(*y))
}

/// Sustained read bandwidth of a 1 GiB buffer with `threads` threads, each
/// reading its share as 4 interleaved streams. Median of 5, GB/s.
pub(crate) fn bandwidth_probe(threads: usize) -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let read = || -> u64 {
        pool.install(|| {
            use rayon::prelude::*;
            buf.par_chunks(buf.len() / threads).map(read_four_streams).sum()
        })
    };
    let mut times = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        std::hint::black_box(read());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (1u64 << 30) as f64 / times[2] / 1e9
}

/// Read bandwidth of one thread from a buffer of `bytes` that stays in cache
/// (256 KiB sits in the L2 of every CPU measured here), read over and over
/// as 4 interleaved streams, as [`bandwidth_probe`] reads DRAM: the ceiling
/// for a hot call's weight bytes. Median of 5 runs of about 20 ms, GB/s.
pub(crate) fn cache_read_probe(bytes: usize) -> f64 {
    let buf = vec![1u64; bytes / 8];
    let q = buf.len() / 4;
    let pass = || {
        std::hint::black_box(read_four_streams(std::hint::black_box(&buf)));
    };
    let passes = ((20 << 20) / bytes.max(1)).max(1);
    let mut rates = vec![];
    for _ in 0..5 {
        pass();
        let t = Instant::now();
        for _ in 0..passes {
            pass();
        }
        rates.push((passes * 4 * q * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    median(&mut rates)
}
