//! `pack_weights`: layers moved into one region keep their bits, their
//! layout and their order, and the region is advised for huge pages where
//! the OS has them.

use qlinear::*;

mod support;
use support::{bits, weights};

/// One layer of each scheme and layout (q8; q4 per channel; q4g32 in the
/// panel form and, at N = 40, natural; q4 grouped by 4), with a bias on
/// some, in each mode that runs it, every tier the plan or a pin picks.
fn layers() -> Vec<Linear> {
    let shapes = [
        (QScheme::Q8, 48, 96, QuantLinearMode::W8A8),
        (QScheme::Q8, 33, 70, QuantLinearMode::W8A16),
        (QScheme::Q4, 40, 64, QuantLinearMode::W4A8),
        (QScheme::Q4, 17, 33, QuantLinearMode::W4A16),
        (QScheme::Q4Grouped(32), 576, 576, QuantLinearMode::W4A8),
        (QScheme::Q4Grouped(32), 40, 96, QuantLinearMode::W4A8),
        (QScheme::Q4Grouped(32), 64, 128, QuantLinearMode::W4A16),
        (QScheme::Q4Grouped(4), 24, 36, QuantLinearMode::W4A8),
    ];
    let mut out = vec![];
    for (i, (scheme, n, k, mode)) in shapes.into_iter().enumerate() {
        let w = weights(n, k, 11 + i as u32);
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.125 - 1.0).collect();
        let layer = Linear::from_f32(scheme, n, k, &w, (i % 2 == 0).then_some(&bias[..]))
            .unwrap()
            .with_mode(mode)
            .unwrap();
        for tier in selftest_report().proven_tiers() {
            out.push(layer.clone().on_tier(tier).unwrap());
        }
        out.push(layer);
    }
    out
}

/// Each layer's outputs at several batch sizes, and by rows.
fn outputs(layers: &[Linear]) -> Vec<Vec<u32>> {
    let mut all = vec![];
    for layer in layers {
        let (n, k) = (layer.out_features(), layer.in_features());
        for m in [1, 3, 16, 17] {
            let x = weights(m, k, 100 + m as u32);
            let mut y = vec![f32::NAN; m * n];
            layer.forward(&x, m, &mut y).unwrap();
            all.push(bits(&y));
            let rows = n / 3..n;
            let mut part = vec![f32::NAN; m * rows.len()];
            layer.forward_rows(&x, m, rows, &mut part).unwrap();
            all.push(bits(&part));
        }
    }
    all
}

/// Packed layers give the bits they gave before, on the same route and in
/// the same layout, reading their codes from the shared region; their
/// natural weights are equal to the old ones.
#[test]
fn packed_layers_keep_their_bits_routes_and_layouts() {
    let before = layers();
    let want = outputs(&before);
    let mut after = before.clone();
    let packed = pack_weights(&mut after.iter_mut().collect::<Vec<_>>()).unwrap();
    assert_eq!(packed.layers, before.len());
    let code_bytes: usize = before
        .iter()
        .map(|l| match l.weight() {
            QuantizedWeight::Q8(m) => m.codes().len(),
            QuantizedWeight::Q4(m) => m.packed().len(),
        })
        .sum();
    assert_eq!(packed.code_bytes, code_bytes);
    assert!(packed.region_bytes >= code_bytes);
    assert_eq!(outputs(&after), want);
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(a.holds_panels(), b.holds_panels(), "{}", a.name());
        assert_eq!(a.route(), b.route());
        assert_eq!((a.bias(), a.mode(), a.scheme()), (b.bias(), b.mode(), b.scheme()));
        if !b.holds_panels() {
            assert!(b.weight().codes_shared(), "{} reads the region", b.name());
        }
        assert_eq!(a.weight(), b.weight());
    }
    assert!(after.iter().any(Linear::holds_panels), "a panel form was packed");
}

/// The layers' codes follow one another in the order given, each at a
/// 64-byte boundary, in one region; the region outlives the layers it was
/// made for, in their clones.
#[test]
fn packed_codes_follow_in_order_at_cache_lines_and_live_in_clones() {
    let mut layers: Vec<Linear> = [(QScheme::Q8, 40, 100), (QScheme::Q4, 24, 33), (QScheme::Q8, 8, 64)]
        .into_iter()
        .map(|(s, n, k)| Linear::from_f32(s, n, k, &weights(n, k, 5), None).unwrap())
        .collect();
    pack_weights(&mut layers.iter_mut().collect::<Vec<_>>()).unwrap();
    let spans: Vec<(usize, usize)> = layers
        .iter()
        .map(|l| {
            let codes = l.weight().code_bytes();
            (codes.as_ptr() as usize, codes.len())
        })
        .collect();
    for (i, &(at, _)) in spans.iter().enumerate() {
        assert_eq!(at % 64, 0, "layer {i} starts on a cache line");
    }
    for pair in spans.windows(2) {
        let end = pair[0].0 + pair[0].1;
        assert_eq!(pair[1].0, end.next_multiple_of(64), "the next layer follows");
    }
    let x = weights(1, 64, 9);
    let mut want = vec![0f32; 8];
    layers[2].forward(&x, 1, &mut want).unwrap();
    let clone = layers[2].clone();
    drop(layers);
    let mut got = vec![f32::NAN; 8];
    clone.forward(&x, 1, &mut got).unwrap();
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(
        clone.weight().code_bytes().as_ptr() as usize,
        spans[2].0,
        "the clone reads the region"
    );
}

/// Nothing to pack is no error; less than 2 MiB of codes goes to the heap
/// (with a cache line's slack for the alignment), without the advice.
#[test]
fn empty_and_small_packs() {
    let none = pack_weights(&mut []).unwrap();
    assert_eq!((none.layers, none.code_bytes, none.huge_pages_advised), (0, 0, false));
    let mut small = Linear::from_f32(QScheme::Q8, 16, 64, &weights(16, 64, 1), None).unwrap();
    let p = pack_weights(&mut [&mut small]).unwrap();
    assert_eq!((p.layers, p.code_bytes, p.region_bytes), (1, 1024, 1024 + 64));
    assert!(!p.huge_pages_advised);
    assert!(small.weight().codes_shared());
}

/// A packed layer moved to another mode keeps its bits there: out of the
/// panel form (W4A16 reads the natural layout) and, in W4A8 again, as the
/// natural layout read from the region.
#[test]
fn a_packed_layer_changes_mode() {
    let (n, k) = (64, 128);
    let w = weights(n, k, 21);
    let mut layer = Linear::from_f32(QScheme::Q4Grouped(32), n, k, &w, None).unwrap();
    let natural = layer.weight().clone();
    pack_weights(&mut [&mut layer]).unwrap();
    for mode in [QuantLinearMode::W4A16, QuantLinearMode::W4A8] {
        let layer = layer.clone().with_mode(mode).unwrap();
        let x = weights(2, k, 4);
        let (mut got, mut want) = (vec![f32::NAN; 2 * n], vec![0f32; 2 * n]);
        layer.forward(&x, 2, &mut got).unwrap();
        quant_linear(mode, &x, 2, &natural, &mut want).unwrap();
        assert_eq!(bits(&got), bits(&want), "{mode}");
        assert_eq!(layer.weight(), &natural);
    }
}

/// On Linux x86-64 (where the tests run natively), a region of several huge
/// pages is advised, and where the kernel's setting lets the advice work
/// (`madvise` or `always`), its memory is mapped by huge pages.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_large_region_sits_on_huge_pages_where_the_kernel_allows_them() {
    let (n, k) = (4096, 2048); // 8 MiB of q8 codes: four huge pages at least
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919) % 255) as f32 - 127.0).collect();
    let mut layer = Linear::from_f32(QScheme::Q8, n, k, &w, None).unwrap();
    let p = pack_weights(&mut [&mut layer]).unwrap();
    assert_eq!(p.region_bytes, 8 << 20);
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() {
        return assert!(!p.huge_pages_advised, "no THP in this kernel, so no advice taken");
    }
    assert!(p.huge_pages_advised, "a THP kernel takes the advice");
    if thp.contains("[never]") {
        return;
    }
    let at = layer.weight().code_bytes().as_ptr() as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let huge_kib = region_field(&smaps, at, "AnonHugePages:").expect("the region is listed in smaps");
    assert!(
        huge_kib >= 2048,
        "{huge_kib} KiB of huge pages in the region (THP {thp:?})"
    );
}

/// `field`'s value (KiB) in the `/proc/self/smaps` entry of the mapping
/// holding `at`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn region_field(smaps: &str, at: usize, field: &str) -> Option<u64> {
    let mut inside = false;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = head.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                inside = (lo..hi).contains(&at);
                continue;
            }
        }
        if inside && line.starts_with(field) {
            return line.split_whitespace().nth(1)?.parse().ok();
        }
    }
    None
}
