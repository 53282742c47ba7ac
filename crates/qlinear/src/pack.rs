//! Many layers' weights in one region of memory, in the order a forward
//! pass reads them, on transparent huge pages where the OS offers them.
//!
//! Why: a decoder's token streams every weight once from DRAM, layer after
//! layer. Each layer's codes in a buffer of their own sit on 4 KiB pages
//! (SmolLM2-135M at q8: about 33 000 of them a token), so the streaming kernels
//! also walk the page tables. In one anonymous map advised for 2 MiB pages
//! (`MADV_HUGEPAGE`) the same bytes take about 70 translations a token, and
//! they run as one stream across the layers. Measured on an AMD EPYC Zen 4
//! (`docs/benchmarks/history.md`, "Weights on huge pages and on cache lines").

use std::sync::Arc;

use qlinear_quant_recipe::SharedBuffer;

use crate::{Linear, Result};

/// Where each layer's codes start in the region: a cache line, so that no
/// 64-byte load of a kernel straddles two lines.
const ALIGN: usize = 64;
/// A transparent huge page on x86-64 and on aarch64 with 4 KiB base pages:
/// the map's length is rounded up to it, so that its last pages can be huge.
const HUGE_PAGE: usize = 2 << 20;

/// What [`pack_weights`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// The layers moved.
    pub layers: usize,
    /// Their code bytes (the scales and biases stay where they were: a few
    /// per cent of the bytes, read once per row or group).
    pub code_bytes: usize,
    /// The region's length: the codes, each layer's start rounded up to 64
    /// bytes, and, for a map, the end rounded up to 2 MiB.
    pub region_bytes: usize,
    /// Whether the region is an anonymous memory map on which the OS took
    /// the advice for transparent huge pages (`MADV_HUGEPAGE`: Linux built
    /// with them). The pages are then huge where
    /// `/sys/kernel/mm/transparent_hugepage/enabled` says `madvise` or
    /// `always` and the kernel finds free 2 MiB frames. `false`: a map
    /// without the advice (other OSes), or a heap buffer: for less than
    /// 2 MiB of codes, or where no map can be made (WebAssembly). The bits
    /// computed are the same either way.
    pub huge_pages_advised: bool,
}

/// Moves the codes of `layers` into one region of memory, one after another
/// in the order given (give them in the order a forward pass calls them:
/// the weights then stream as one run), each at a 64-byte boundary. The
/// region is an anonymous memory map advised for transparent huge pages
/// ([`Packed::huge_pages_advised`]), or a heap buffer for less than 2 MiB
/// of codes or where no map can be made. Each layer then reads its codes in
/// place from the region ([`Linear::codes_shared`] is true), which
/// its clones share and which lives as long as any of them.
///
/// The layers compute the same bits as before, on the same route and in the
/// same layout (a layer holding the panel form keeps it). Their former code
/// buffers are freed once every layer has moved, unless something else
/// holds them (a clone made before, or a file's bytes for layers read in
/// place, which are copied out of them): for that moment both copies are
/// resident. Set the layers' modes first: a layer whose codes are shared
/// does not take the panel form later (`Linear::with_mode`).
///
/// The region is anonymous memory filled once by copying: no file stays
/// mapped for it. Errors: none in practice (the region is made to fit
/// the codes); the layers are left as they were if one occurs.
pub fn pack_weights(layers: &mut [&mut Linear]) -> Result<Packed> {
    let mut starts = Vec::with_capacity(layers.len());
    let mut end = 0usize;
    for layer in layers.iter() {
        let start = end.next_multiple_of(ALIGN);
        starts.push(start);
        end = start + layer.code_bytes().len();
    }
    let code_bytes = layers.iter().map(|l| l.code_bytes().len()).sum();
    let (buffer, base, region_bytes, huge_pages_advised) = fill(layers, &starts, end);
    let moved = layers
        .iter()
        .zip(&starts)
        .map(|(l, &start)| l.with_shared_codes(buffer.clone(), base + start))
        .collect::<Result<Vec<_>>>()?;
    for (layer, moved) in layers.iter_mut().zip(moved) {
        **layer = moved;
    }
    Ok(Packed {
        layers: layers.len(),
        code_bytes,
        region_bytes,
        huge_pages_advised,
    })
}

/// The region holding each layer's codes at `base + start`, `base` the
/// first cache line of the buffer: the buffer, `base`, the region's length,
/// and whether huge pages were advised for it.
fn fill(layers: &[&mut Linear], starts: &[usize], len: usize) -> (SharedBuffer, usize, usize, bool) {
    let copy = |region: &mut [u8]| {
        for (layer, &start) in layers.iter().zip(starts) {
            let codes = layer.code_bytes();
            region[start..start + codes.len()].copy_from_slice(codes);
        }
    };
    let mapped = len.next_multiple_of(HUGE_PAGE);
    // below one huge page there is nothing to gain, and a map would round
    // a small layer up to 2 MiB
    let map = (len >= HUGE_PAGE).then(|| memmap2::MmapOptions::new().len(mapped).map_anon());
    match map.unwrap_or_else(|| Err(std::io::ErrorKind::Unsupported.into())) {
        Ok(mut map) => {
            // Advised before the first write, so that the first touch of
            // each 2 MiB faults in a huge page rather than 512 small ones.
            let advised = advise_huge_pages(&map);
            // a map starts on a page
            copy(&mut map[..len]);
            (Arc::new(map), 0, mapped, advised)
        }
        Err(_) => {
            // the allocator promises no more than the alignment of u8
            let mut heap = vec![0u8; len + ALIGN];
            let base = heap.as_ptr().align_offset(ALIGN).min(ALIGN);
            copy(&mut heap[base..base + len]);
            (Arc::new(heap), base, len + ALIGN, false)
        }
    }
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(map: &memmap2::MmapMut) -> bool {
    map.advise(memmap2::Advice::HugePage).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_: &memmap2::MmapMut) -> bool {
    false
}
