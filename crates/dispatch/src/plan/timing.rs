//! How the plan times a family on each proven tier: the weights it streams
//! (decode past L2, batches hot), the rounds, and the choice between tiers.

use super::*;

/// The K decode is timed at: a real layer's, so per-call and per-row costs
/// weigh what they weigh in a model.
pub(super) const PLAN_K: usize = 4096;
/// The K batches are timed at: their cost grows with N · K alike, and the
/// float families' fixed summation order makes 4096 columns take
/// milliseconds.
pub(super) const PLAN_BATCH_K: usize = 1024;
/// Decode (M = 1) is timed on weights streamed past L2, as a decoder reads
/// them: each timed call reads the next of [`PLAN_DECODE_COPIES`]` − 1`
/// buffers of [`PLAN_DECODE_COPY_BYTES`] in turn, last read 6 calls (3 MiB)
/// before, so every call finds its weights evicted from L2 (L2 is 0.5–2 MiB
/// a core on the x86 and ARM cores this targets); the probes read the last
/// buffer, which no timed call reads. A small hot matrix favours the widest
/// loads and picked the 4-row lockstep VNNI kernels on a Zen 4 where
/// streaming weights ran 1.4–2.2× slower than AVX2 (issue #20 of the
/// tracker). The buffers are faulted in once and lent to each weight kind
/// in turn (128 Q8 rows or 256 Q4 rows of [`PLAN_K`] a buffer): a fresh
/// page costs more in a VM than the kernels take to read it.
pub(super) const PLAN_DECODE_COPY_BYTES: usize = 512 << 10;
/// Buffers in the decode pool (4 MiB): the timed calls take the first 7 in
/// turn, so a buffer is read again only after the 6 others (3 MiB) have
/// passed, and with two tiers alternating (an odd count) each tier reads
/// every buffer; the probes take the eighth.
pub(super) const PLAN_DECODE_COPIES: usize = 8;
/// Batches (every M > 1) are bound by their arithmetic: timed at M = 16 on
/// one matrix of [`PLAN_BATCH_N`] rows, hot.
pub(super) const PLAN_BATCH_M: usize = 16;
/// Rows of the batch matrix: every tier's widest batch tile several times.
pub(super) const PLAN_BATCH_N: usize = 64;
/// Calls per tier and regime after the probe (a warm-up, then the timed
/// rounds); at decode each call reads the next buffer of the pool, so no
/// call finds its weights in L2. Each timed call follows an untimed call of
/// the same tier on the probe's slice ([`PLAN_PROBE_SLICE`], hot): the first
/// call of an AVX-512 tier after another tier's runs 1.5–2 µs slower on an
/// Intel Xeon (family 6 model 207: W8A8 decode, 128 × 4096, 20.0 against
/// 18.5 µs for a second call straight after), a switch a model's layers,
/// all on one tier, never pay; timed straight after the other tier, every
/// VNNI call paid it, and AVX2 looked 10 % faster at decode where it is 5 %.
/// (Two timed calls a turn instead put a tier's calls back to back, where
/// one slow spell of the machine took both and ended the timing early.)
pub(super) const PLAN_DECODE_CALLS: usize = 5;
/// The probe calls of a tier compute this fraction of the rows; a tier
/// whose extrapolated time already loses by 3× stops there, so the scalar
/// tier costs little.
pub(super) const PLAN_PROBE_SLICE: usize = 8;
/// Two tiers whose best calls are within this fraction of each other are
/// timed for [`PLAN_CLOSE_ROUNDS`] more rounds: in the VMs measured the
/// machine slows by up to 1.8× for milliseconds at a time, and more calls
/// give each tier more chances of a call outside such a spell.
pub(super) const PLAN_CLOSE: f64 = 0.10;
/// The extra rounds of a close call.
pub(super) const PLAN_CLOSE_ROUNDS: usize = 4;
/// Two tiers already this far apart after [`PLAN_CLEAR_AFTER`] rounds are
/// not timed further: no slow spell seen here moved a ratio by as much
/// (the largest, W4A16 grouped decode, 1.3× to 0.98×, was a tie the other
/// way), and most families' tiers are 1.3–2.5× apart.
pub(super) const PLAN_CLEAR: f64 = 0.30;
/// Rounds after which a clear call stops.
pub(super) const PLAN_CLEAR_AFTER: usize = 2;
/// Batch timings within this fraction of the best are a tie ([`pick`]).
pub(super) const PLAN_BATCH_TIE: f64 = 0.03;
/// Decode timings within this fraction of the best are a tie ([`pick`]),
/// wider than a batch's: one thread streaming from L3 (the plan's decode
/// regime) is bound by the cache, not the kernel, and the tiers land
/// within a few per cent of each other (W8A8 decode on an Intel Xeon,
/// family 6 model 207: AVX2 16.8–45.8 µs, AVX-512 VNNI 17.6–33.9 in 12
/// plans, either ahead), while where the memory system is loaded harder the
/// tier with fewer instructions a byte pulls ahead (the same kernels at
/// 11008 × 4096 from DRAM on two threads: VNNI 1.36× faster; SmolLM2's q8
/// decode on two threads, VNNI 1.07–1.5× faster). A tie goes to the wider
/// tier.
pub(super) const PLAN_DECODE_TIE: f64 = 0.10;
/// The float-activation families (W8A16, W4A16, grouped W4A16) are timed
/// on this fraction of the matrices' rows: they run at 5–25 % of the
/// memory bandwidth, bound by their arithmetic wherever the weights come
/// from, and were about half the plan's time on whole matrices (4.8–6.1 of
/// 11.8–13.3 ms on an AMD EPYC Zen 4, family 25 model 17). Each call still reads
/// the next buffer of the decode pool, so its rows come from past L2.
pub(super) const PLAN_FLOAT_ROWS: usize = 4;
/// Probe calls per tier, the best of which counts: a tier's first call
/// pays for its code and tables coming into cache, which once let the
/// scalar tier's probe look within 3× of a cold VNNI probe. A tier whose
/// first probe already loses by 3× to the best warm one makes no second.
pub(super) const PLAN_PROBE_CALLS: usize = 2;

/// Matrices of one weight kind.
pub(super) enum Matrices {
    Q8(Vec<QuantizedMatrix>),
    Q4(Vec<QuantizedMatrixQ4>),
    /// Q4 matrices' bytes taken as panel forms as they lie (the values do
    /// not change the time): timing W4A8 on the panel form writes no 4 MiB
    /// of copies, which cost 2.8 ms of page faults and permutation in a
    /// plan of 12 ms on an Intel Xeon.
    Panels(Vec<PanelsQ4>),
}

impl Matrices {
    /// Q4 matrices (grouped by 32 or per channel) as panel forms of the
    /// same buffers (no copy); anything else as it is.
    pub(super) fn into_panels(self) -> Matrices {
        match self {
            Matrices::Q4(v)
                if v.iter().all(|w| {
                    matches!(
                        w.scales(),
                        Q4Scales::Grouped { group: 32, .. } | Q4Scales::PerChannel(_)
                    )
                }) =>
            {
                Matrices::Panels(
                    v.into_iter()
                        .filter_map(|w| {
                            let (n, k) = (w.n(), w.k());
                            let (codes, scales) = w.into_codes();
                            PanelsQ4::from_panel_codes(n, k, codes, scales)
                        })
                        .collect(),
                )
            }
            other => other,
        }
    }

    /// Panel forms as the matrices of the same buffers (no copy); anything
    /// else as it is.
    pub(super) fn into_natural(self) -> Matrices {
        match self {
            Matrices::Panels(v) => Matrices::Q4(
                v.into_iter()
                    .filter_map(|p| {
                        let (n, k) = (p.n(), p.k());
                        let (codes, scales) = p.into_panel_codes();
                        QuantizedMatrixQ4::from_codes_biased(n, k, codes, scales).ok()
                    })
                    .collect(),
            ),
            other => other,
        }
    }
}

/// The synthetic weights the plan times: the decode pool (lent to one
/// kind at a time as [`PLAN_DECODE_COPIES`] matrices), and for batches one
/// matrix of [`PLAN_BATCH_N`] rows per kind.
pub(super) struct PlanWeights {
    pub(super) pool: Vec<Codes<u8>>,
    /// The grouped decode matrices' f16 scales (groups of 32), one per buffer.
    pub(super) group_scales: Vec<Vec<f16>>,
    pub(super) batch: [Matrices; 3],
}

impl PlanWeights {
    pub(super) fn new() -> Self {
        // codes in -127..=127 (valid Q8 codes; any byte is a valid pair of
        // Q4 nibbles), a pattern repeated per 4 KiB: the values do not
        // change the time
        let block: Vec<u8> = (0..4096i32).map(|i| (i * 37 % 255 - 127) as i8 as u8).collect();
        let fill = |len: usize| -> Codes<u8> {
            let mut c = Codes::zeroed(len);
            for chunk in c.as_mut_slice().into_iter().flat_map(|v| v.chunks_mut(block.len())) {
                chunk.copy_from_slice(&block[..chunk.len()]);
            }
            c
        };
        let group_scales = |n: usize, k: usize| vec![f16::from_f32(0.01); n * k / 32];
        let (bn, bk) = (PLAN_BATCH_N, PLAN_BATCH_K);
        let batch = [
            Matrices::Q8(q8_matrix(bn, bk, fill(bn * bk)).into_iter().collect()),
            Matrices::Q4(q4_matrix(bn, bk, fill(bn * bk / 2), None).into_iter().collect()),
            Matrices::Q4(
                q4_matrix(bn, bk, fill(bn * bk / 2), Some(group_scales(bn, bk)))
                    .into_iter()
                    .collect(),
            ),
        ];
        let q4_rows = 2 * PLAN_DECODE_COPY_BYTES / PLAN_K;
        // filled on the pool's threads: faulting in 4 MiB was a fifth of
        // the plan's time on one thread; on this thread alone where it is a
        // pool thread (a planner never waits for the pool: `lock_beside_pool`)
        let pool = if rayon::current_thread_index().is_some() {
            (0..PLAN_DECODE_COPIES).map(|_| fill(PLAN_DECODE_COPY_BYTES)).collect()
        } else {
            (0..PLAN_DECODE_COPIES)
                .into_par_iter()
                .map(|_| fill(PLAN_DECODE_COPY_BYTES))
                .collect()
        };
        PlanWeights {
            pool,
            group_scales: (0..PLAN_DECODE_COPIES).map(|_| group_scales(q4_rows, PLAN_K)).collect(),
            batch,
        }
    }

    /// The batch matrix of `kind`.
    pub(super) fn batch(&self, kind: Weights) -> &Matrices {
        match kind {
            Weights::Q8 => &self.batch[0],
            Weights::Q4 => &self.batch[1],
            Weights::Q4Grouped => &self.batch[2],
        }
    }

    /// The decode pool as matrices of `kind` (the buffers move, nothing is
    /// copied); [`PlanWeights::take_back`] returns them to the pool.
    pub(super) fn lend(&mut self, kind: Weights) -> Matrices {
        let (k, pool) = (PLAN_K, std::mem::take(&mut self.pool));
        match kind {
            // the same bytes as i8 (moved: no copy, no allocation)
            Weights::Q8 => Matrices::Q8(
                pool.into_iter()
                    .filter_map(|b| q8_matrix(PLAN_DECODE_COPY_BYTES / k, k, b))
                    .collect(),
            ),
            Weights::Q4 => Matrices::Q4(
                pool.into_iter()
                    .filter_map(|b| q4_matrix(2 * PLAN_DECODE_COPY_BYTES / k, k, b, None))
                    .collect(),
            ),
            Weights::Q4Grouped => {
                let scales = std::mem::take(&mut self.group_scales);
                Matrices::Q4(
                    pool.into_iter()
                        .zip(scales)
                        .filter_map(|(b, s)| q4_matrix(2 * PLAN_DECODE_COPY_BYTES / k, k, b, Some(s)))
                        .collect(),
                )
            }
        }
    }

    /// Returns lent matrices' buffers (and group scales) to the pool.
    pub(super) fn take_back(&mut self, m: Matrices) {
        match m.into_natural() {
            Matrices::Q8(v) => {
                self.pool = v.into_iter().map(|w| w.into_codes().0.cast()).collect();
            }
            Matrices::Q4(v) => {
                for w in v {
                    let (packed, scales) = w.into_codes();
                    self.pool.push(packed);
                    if let Q4Scales::Grouped { scales, .. } = scales {
                        self.group_scales.push(scales);
                    }
                }
            }
            // into_natural leaves none
            Matrices::Panels(_) => {}
        }
    }
}

/// An `n × k` Q8 matrix on `bytes` (codes in -127..=127 by construction; a
/// refusal would leave the kind untimed, never a panic in a library).
pub(super) fn q8_matrix(n: usize, k: usize, bytes: Codes<u8>) -> Option<QuantizedMatrix> {
    QuantizedMatrix::from_codes(n, k, bytes.cast(), vec![0.01; n]).ok()
}

/// An `n × k` Q4 matrix on `packed`, per channel, or grouped by 32 with
/// `group_scales`.
pub(super) fn q4_matrix(
    n: usize,
    k: usize,
    packed: Codes<u8>,
    group_scales: Option<Vec<f16>>,
) -> Option<QuantizedMatrixQ4> {
    let scales = match group_scales {
        Some(scales) => Q4Scales::Grouped { group: 32, scales },
        None => Q4Scales::PerChannel(vec![0.01; n]),
    };
    QuantizedMatrixQ4::from_codes_biased(n, k, packed, scales).ok()
}

/// The widest tier whose time is within `tie` of the best (`timed` in the
/// order of `tables`, widest first), and of tiers that run one kernel for
/// the family the narrowest. A tie is not a property of the kernels here:
/// in the VMs this was measured in, the machine slows 1.5× for spells of
/// milliseconds, and in such a spell W4A16 grouped decode on AVX-512 VNNI
/// and AVX2 timed within 2 % of each other where out of it VNNI was 1.3×
/// faster. Preferring the narrower tier on a tie took the slower kernel.
pub(super) fn pick(
    tables: &[(Int8Tier, &KernelTable)],
    timed: &[(Int8Tier, f64)],
    family: KernelFamily,
    tie: f64,
) -> Int8Tier {
    let best = timed.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    let Some(mut j) = timed.iter().position(|t| t.1 <= best * (1.0 + tie)) else {
        return Int8Tier::Scalar;
    };
    while let Some(i) = (j + 1..tables.len()).find(|&i| tables[i].1.same_gemm(tables[j].1, family)) {
        j = i;
    }
    timed[j].0
}

/// Whether the plan times `family` on the panel form (the decode pool lent
/// as panel forms, the batch matrix copied): only where a SIMD tier reads
/// it (W4A8 grouped or per channel, on a tier with such panel tiles; a
/// table may have none). The scalar tier's panel tiles never win a timing,
/// so it alone builds none.
pub(super) fn builds_panels(tables: &[(Int8Tier, &KernelTable)], family: KernelFamily) -> bool {
    tables
        .iter()
        .any(|(t, table)| *t != Int8Tier::Scalar && table.panels(family).is_some())
}

/// What one family is timed on at one regime: synthetic activations and
/// the matrices of its weight kind.
pub(super) struct PlanInputs<'w> {
    pub(super) family: KernelFamily,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) xc: Vec<i8>,
    pub(super) xf: Vec<f32>,
    pub(super) xs: Vec<f32>,
    pub(super) sums: Vec<i32>,
    pub(super) sum_group: usize,
    pub(super) q8: &'w [QuantizedMatrix],
    pub(super) q4: &'w [QuantizedMatrixQ4],
    /// W4A8 (grouped or per channel): the panel forms, which a tier with
    /// panel tiles for the family reads
    /// (a layer on that tier holds its weight so): the plan times what a
    /// layer would run. The decode pool lent as such, or the batch
    /// matrix's, copied. Empty where no SIMD tier has panel tiles; the
    /// scalar tier is then timed on the natural layout.
    pub(super) panels: Cow<'w, [PanelsQ4]>,
}

impl<'w> PlanInputs<'w> {
    /// The inputs of `family` at `m` rows on `w`; `panels` builds the
    /// panel forms of its matrices (W4A8, grouped or per channel).
    pub(super) fn new(family: KernelFamily, m: usize, w: &'w Matrices, panels: bool) -> Self {
        let grouped = family.weights() == Some(Weights::Q4Grouped);
        let (q8, q4, lent): (&[QuantizedMatrix], &[QuantizedMatrixQ4], &[PanelsQ4]) = match w {
            Matrices::Q8(v) => (v, &[], &[]),
            Matrices::Q4(v) => (&[], v, &[]),
            Matrices::Panels(v) => (&[], &[], v),
        };
        let (n, k) = match (q8.first(), q4.first(), lent.first()) {
            (Some(w), _, _) => (w.n(), w.k()),
            (_, Some(w), _) => (w.n(), w.k()),
            (_, _, Some(p)) => (p.n(), p.k()),
            _ => (0, 0),
        };
        let n = if family.float_activations() {
            n / PLAN_FLOAT_ROWS
        } else {
            n
        };
        let mut rng = Rng::new(7);
        let xc: Vec<i8> = rng.codes(m * k);
        let xf: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
        let sum_group = if grouped { 32 } else { k };
        let sums = activation_group_sums(&xc, m, k, sum_group);
        let panels = if !lent.is_empty() {
            Cow::Borrowed(lent)
        } else if panels {
            Cow::Owned(q4.iter().filter_map(PanelsQ4::new).collect())
        } else {
            Cow::Borrowed(&[][..])
        };
        PlanInputs {
            family,
            m,
            n,
            k,
            xc,
            xf,
            xs: vec![0.01; m],
            sums,
            sum_group,
            q8,
            q4,
            panels,
        }
    }

    /// The matrices a call may read: the decode pool's, or the one batch
    /// matrix.
    pub(super) fn copies(&self) -> usize {
        self.q8.len().max(self.q4.len()).max(self.panels.len()).max(1)
    }

    /// One call of `table`'s kernel on the first `rows` rows of matrix
    /// `copy` (modulo the copies), in ns.
    pub(super) fn run(&self, table: &KernelTable, y: &mut [f32], copy: usize, rows: usize) -> f64 {
        let (m, k, n) = (self.m, self.k, self.n);
        let (Ok(aq), Ok(af)) = (
            ActivationsQ8::new(m, k, &self.xc, &self.xs, &self.sums, self.sum_group),
            ActivationsF32::new(m, k, &self.xf),
        ) else {
            // the probe builds its own buffers to the shape: unreachable, and
            // a tier never wins on a call that did not run
            return f64::INFINITY;
        };
        let copies = self.copies();
        let t = &mut OutputTile::new(y, n);
        let start = Instant::now();
        if let (Some(f), Some(w)) = (table.panels(self.family), self.panels.get(copy % copies)) {
            f(&aq, w, 0..rows, t);
            return start.elapsed().as_secs_f64() * 1e9;
        }
        match (
            table.gemm(self.family),
            self.q8.get(copy % copies),
            self.q4.get(copy % copies),
        ) {
            (Some(Gemm::Q8Q8(f)), Some(w), _) => f(&aq, w, 0..rows, t),
            (Some(Gemm::F32Q8(f)), Some(w), _) => f(&af, w, 0..rows, t),
            (Some(Gemm::Q8Q4(f)), _, Some(w)) => f(&aq, w, 0..rows, t),
            (Some(Gemm::F32Q4(f)), _, Some(w)) => f(&af, w, 0..rows, t),
            // nothing ran (a table without a panel entry on lent panel
            // forms): a tier never wins on a call that did not run
            _ => return f64::INFINITY,
        }
        start.elapsed().as_secs_f64() * 1e9
    }

    /// Times `tables` (widest first) and returns each tier's time in ns:
    /// first up to [`PLAN_PROBE_CALLS`] calls per tier on
    /// 1/[`PLAN_PROBE_SLICE`] of the rows (a tier whose best probe,
    /// extrapolated, is over 3× the best so far has lost, and that
    /// extrapolation is its time), then a warm-up call per remaining tier,
    /// then `PLAN_DECODE_CALLS − 1` rounds of one call per tier (each after
    /// an untimed call on the probe's slice, see [`PLAN_DECODE_CALLS`]),
    /// alternated so that drift in the machine's speed falls on every tier
    /// alike
    /// ([`PLAN_CLEAR_AFTER`] when the two fastest are already more than
    /// [`PLAN_CLEAR`] apart, [`PLAN_CLOSE_ROUNDS`] more when they are within
    /// [`PLAN_CLOSE`] of each other); each tier's best call.
    /// Decode: every full call reads the pool's matrix at `cursor` (modulo
    /// all but the last) and moves it on, and every family shares one
    /// cursor, so a matrix is read again only after all the others, across
    /// families too; a probe reads the last matrix, which no full call reads
    /// (a probe only has to tell a tier 3× slower apart). Before, each
    /// family started at the first matrix and the probes took turns with
    /// the full calls: on an Intel Xeon with 2 MiB of L2 some full calls
    /// then found their buffer just written by the pool's fill or partly
    /// kept in L2 by five probes, ran up to 2× faster than the rest, and the
    /// best call, which decides, went to whichever tier it fell on (W8A8
    /// decode chose AVX2 in some processes where AVX-512 VNNI is as fast at
    /// one thread and 1.36× faster at two).
    /// A tier that runs an earlier tier's kernel for the family takes that
    /// tier's time ([`pick`] then keeps the narrower of the two).
    pub(super) fn time(&self, tables: &[(Int8Tier, &KernelTable)], cursor: &Cell<usize>) -> Vec<(Int8Tier, f64)> {
        let mut y = vec![0f32; self.m * self.n];
        let call = |table: &KernelTable, y: &mut [f32], rows: usize| {
            let copy = pool_copy(cursor, self.copies(), rows < self.n);
            self.run(table, y, copy, rows)
        };
        let mut times: Vec<(Int8Tier, f64)> = vec![];
        let mut alive: Vec<usize> = vec![];
        // a tier that runs an earlier tier's kernel for this family is timed
        // once, as that tier: the choice between them is no choice
        let mut same: Vec<Option<usize>> = vec![None; tables.len()];
        for (j, &(tier, table)) in tables.iter().enumerate() {
            same[j] = (0..j).find(|&i| same[i].is_none() && tables[i].1.same_gemm(table, self.family));
            if let Some(i) = same[j] {
                times.push((tier, times[i].1));
                continue;
            }
            let best = times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
            let mut probe = f64::INFINITY;
            for _ in 0..PLAN_PROBE_CALLS {
                probe = probe.min(call(table, &mut y, self.n / PLAN_PROBE_SLICE) * PLAN_PROBE_SLICE as f64);
                if probe > 3.0 * best {
                    break;
                }
            }
            times.push((tier, probe));
            if probe <= 3.0 * best {
                alive.push(j);
            }
        }
        for &j in &alive {
            call(tables[j].1, &mut y, self.n);
            times[j].1 = f64::INFINITY;
        }
        // the two fastest tiers' ratio so far
        let gap = |times: &[(Int8Tier, f64)]| {
            let mut t: Vec<f64> = alive.iter().map(|&j| times[j].1).collect();
            t.sort_by(f64::total_cmp);
            if t.len() > 1 {
                t[1] / t[0]
            } else {
                f64::INFINITY
            }
        };
        let mut rounds = PLAN_DECODE_CALLS - 1;
        let mut round = 0;
        while round < rounds {
            for &j in &alive {
                call(tables[j].1, &mut y, self.n / PLAN_PROBE_SLICE);
                let ns = call(tables[j].1, &mut y, self.n);
                times[j].1 = times[j].1.min(ns);
            }
            round += 1;
            if round == PLAN_CLEAR_AFTER && gap(&times) > 1.0 + PLAN_CLEAR {
                break;
            }
            if round == PLAN_DECODE_CALLS - 1 && gap(&times) < 1.0 + PLAN_CLOSE {
                rounds += PLAN_CLOSE_ROUNDS;
            }
        }
        for (j, s) in same.iter().enumerate() {
            if let Some(i) = *s {
                times[j].1 = times[i].1;
            }
        }
        times
    }
}

/// The matrix of `copies` a call reads ([`PlanInputs::time`]): a probe the
/// last, a full call the one at `cursor` among the others, moving the
/// cursor on; the only one when there is one (the batch matrix).
pub(super) fn pool_copy(cursor: &Cell<usize>, copies: usize, probe: bool) -> usize {
    match copies {
        0 | 1 => 0,
        _ if probe => copies - 1,
        _ => cursor.replace(cursor.get() + 1) % (copies - 1),
    }
}
