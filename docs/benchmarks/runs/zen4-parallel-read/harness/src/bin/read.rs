//! A file read into huge-page-advised anonymous memory by THREADS threads,
//! each `pread`ing its part, as `read_private` does: `read FILE THREADS`.
use std::os::unix::fs::FileExt;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, threads): (&str, usize) = (&args[1], args[2].parse().unwrap());
    let file = std::fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    let t0 = Instant::now();
    let huge = 2usize << 20;
    let mut map = memmap2::MmapOptions::new()
        .len(len.next_multiple_of(huge))
        .map_anon()
        .unwrap();
    let _ = map.advise(memmap2::Advice::HugePage);
    let buf = &mut map[..len];
    let chunk = len.div_ceil(threads).next_multiple_of(huge);
    std::thread::scope(|s| {
        for (i, part) in buf.chunks_mut(chunk).enumerate() {
            let file = &file;
            s.spawn(move || {
                let mut off = 0;
                while off < part.len() {
                    let n = file.read_at(&mut part[off..], (i * chunk + off) as u64).unwrap();
                    assert!(n > 0);
                    off += n;
                }
            });
        }
    });
    let e = t0.elapsed();
    let sum: u64 = map.iter().step_by(4096).map(|&b| b as u64).sum();
    println!("{path} threads {threads}: {:.3} s ({sum})", e.as_secs_f64());
}
