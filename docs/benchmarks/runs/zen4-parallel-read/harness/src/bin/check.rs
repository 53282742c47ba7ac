//! The −128 check over 1.6 GB of codes (from DRAM): `contains` (a
//! word-at-a-time memchr) against a fold over 4 KiB blocks, three times.
use std::time::Instant;

fn by_memchr(c: &[i8]) -> bool {
    c.contains(&i8::MIN)
}

fn by_blocks(c: &[i8]) -> bool {
    c.chunks(4096)
        .any(|ch| ch.iter().fold(false, |a, &b| a | (b == i8::MIN)))
}

fn main() {
    let n = 1600usize << 20;
    let v: Vec<i8> = (0..n)
        .map(|i| ((i * 31 + i / 7) % 255) as i8)
        .map(|x| if x == i8::MIN { 0 } else { x })
        .collect();
    for _ in 0..3 {
        for (name, f) in [("contains", by_memchr as fn(&[i8]) -> bool), ("blocks", by_blocks)] {
            let t = Instant::now();
            let r = f(std::hint::black_box(&v));
            println!("{name}: {:.3} s {r}", t.elapsed().as_secs_f64());
        }
    }
}
