//! The team decode step ([`DecodeSplit::Team`]).

use super::*;

impl Model {
    /// One decode step, token `token` at position `cache.len()`, run by
    /// every thread of the current rayon pool as a team ([`DecodeSplit::Team`],
    /// `team.rs`): each thread embeds the token and keeps its own copy of
    /// the residual stream (the norms run on every thread alike), computes
    /// its query heads' rows of Q and its share of the K and V rows (writing
    /// them into the cache), attends for its query heads, and takes a share
    /// of each other layer's output features; the shares are gathered
    /// between layers. Every output is computed by one thread with the
    /// arithmetic of [`Model::forward`]'s own path, so the logits are
    /// bit-identical to it. On a profiled cache each thread charges its
    /// time to the step's phases as it passes their boundaries
    /// ([`crate::profile`]). The caller has checked the token and the room.
    pub(super) fn step_team<'c>(&self, cache: &'c mut KvCache, token: u32) -> Result<&'c [f32]> {
        let c = &self.config;
        let threads = rayon::current_num_threads();
        let (h, hd, pos, capacity) = (c.hidden, c.head_dim, cache.len, cache.capacity);
        let kv_dim = c.kv_heads * hd;
        prepare_team(cache, c, threads);
        // the position's RoPE rows, once for every thread
        let scratch = &mut cache.scratch;
        self.rope_rows(pos, 1, &mut scratch.cos, &mut scratch.sin);
        let KvCache {
            kv: kv_cache,
            team,
            exchange,
            profile,
            scratch,
            ..
        } = &*cache;
        let rope = (&scratch.cos[..], &scratch.sin[..]);
        let step = |t: usize| -> Result<()> {
            let running = AbortUnlessDone::new(exchange.barrier());
            let mut local = team[t].lock().unwrap_or_else(PoisonError::into_inner);
            let s = &mut *local;
            let heads = share_items(c.heads, t, threads);
            let mut m = Member {
                t,
                pos,
                capacity,
                q_rows: heads.start * hd..heads.end * hd,
                heads,
                kv_rows: share(kv_dim, t, threads),
                h_rows: share(h, t, threads),
                f_rows: share(c.ffn, t, threads),
                caches: kv_cache,
                rope,
                exchange,
                round: 0,
                clock: Clock::new(profile.as_ref().map(|p| &p[t])),
            };
            self.embed_row(token, &mut s.x)?;
            m.clock.lap(Phase::Other);
            for (l, layer) in self.layers.iter().enumerate() {
                self.team_attention(&mut m, l, layer, s)?;
                self.team_mlp(&mut m, layer, s)?;
            }
            rms_norm(&s.x, &self.norm, c.eps, &mut s.h[..h]);
            self.rotate_inputs(&mut s.h[..h], Width::Hidden);
            m.clock.lap(Phase::Norms);
            let v_rows = share(c.vocab, t, threads);
            self.head
                .forward_rows(&s.h[..h], v_rows.clone(), &mut s.logits[v_rows])?;
            m.clock.lap(Phase::Head);
            running.done();
            Ok(())
        };
        let results = rayon::broadcast(|ctx| {
            if ctx.num_threads() == threads {
                step(ctx.index())
            } else {
                // not reachable: the pool asked is the pool run on
                exchange.barrier().abort();
                Err(Error::TeamAborted)
            }
        });
        first_error(results)?;
        let KvCache { team, scratch, .. } = cache;
        scratch.logits.resize(c.vocab, 0.0);
        for (t, local) in team.iter_mut().enumerate() {
            let rows = share(c.vocab, t, threads);
            let local = local.get_mut().unwrap_or_else(PoisonError::into_inner);
            scratch.logits[rows.clone()].copy_from_slice(&local.logits[rows]);
        }
        cache.len += 1;
        if cache.profile.is_some() {
            cache.profiled_steps += 1;
        }
        Ok(&cache.scratch.logits)
    }

    /// Thread `m.t`'s part of block `l`'s attention: the norm, its rows of
    /// Q, K and V (the keys and values written into the cache), and, once
    /// every thread's are held, its query heads attending; the heads'
    /// outputs gathered, its share of the output projection, gathered and
    /// added to the residual stream.
    fn team_attention(&self, m: &mut Member<'_>, l: usize, layer: &Layer, s: &mut Scratch) -> Result<()> {
        let c = &self.config;
        let (h, hd, pos) = (c.hidden, c.head_dim, m.pos);
        rms_norm(&s.x, &layer.attn_norm, c.eps, &mut s.h[..h]);
        self.rotate_inputs(&mut s.h[..h], Width::Hidden);
        m.clock.lap(Phase::Norms);
        let (q_rows, kv_rows) = (m.q_rows.clone(), m.kv_rows.clone());
        layer
            .q
            .forward_rows(&s.h[..h], q_rows.clone(), &mut s.q[q_rows.clone()])?;
        layer
            .k
            .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.k[kv_rows.clone()])?;
        layer
            .v
            .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.v[kv_rows.clone()])?;
        m.clock.lap(Phase::Qkv);
        self.rotate(&mut s.q, q_rows.clone(), m.rope.0, m.rope.1);
        self.rotate(&mut s.k, kv_rows.clone(), m.rope.0, m.rope.1);
        m.caches[l]
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .store(&s.k, &s.v, kv_rows, hd, m.capacity, pos);
        m.clock.lap(Phase::Rope);
        // every thread's keys and values of this position are held
        m.exchange.barrier().wait()?;
        m.clock.lap(Phase::Waits);
        {
            let kv = m.caches[l].read().unwrap_or_else(PoisonError::into_inner);
            let held = Held {
                kv: kv.rows(),
                capacity: m.capacity,
                span: pos + 1,
            };
            let group = c.heads / c.kv_heads;
            for head in m.heads.clone() {
                let (qh, o) = (&s.q[head * hd..(head + 1) * hd], &mut s.att[head * hd..(head + 1) * hd]);
                attend(hd, pos, qh, &held, head / group, o, &mut s.scores);
            }
        }
        m.clock.lap(Phase::Attention);
        m.exchange.all_gather(m.t, &mut m.round, q_rows, &mut s.att)?;
        m.clock.lap(Phase::Waits);
        self.rotate_inputs(&mut s.att, Width::Hidden);
        m.clock.lap(Phase::Norms);
        let h_rows = m.h_rows.clone();
        layer.o.forward_rows(&s.att, h_rows.clone(), &mut s.o[h_rows.clone()])?;
        m.clock.lap(Phase::Output);
        m.exchange.all_gather(m.t, &mut m.round, h_rows, &mut s.o)?;
        m.clock.lap(Phase::Waits);
        s.x.iter_mut().zip(&s.o).for_each(|(x, o)| *x += o);
        m.clock.lap(Phase::Other);
        Ok(())
    }

    /// Thread `m.t`'s part of a block's MLP: the norm, its share of gate and
    /// up and their SwiGLU, gathered; its share of down, gathered and added
    /// to the residual stream.
    fn team_mlp(&self, m: &mut Member<'_>, layer: &Layer, s: &mut Scratch) -> Result<()> {
        let c = &self.config;
        let h = c.hidden;
        let (f_rows, h_rows) = (m.f_rows.clone(), m.h_rows.clone());
        rms_norm(&s.x, &layer.ffn_norm, c.eps, &mut s.h[..h]);
        self.rotate_inputs(&mut s.h[..h], Width::Hidden);
        m.clock.lap(Phase::Norms);
        layer
            .gate
            .forward_rows(&s.h[..h], f_rows.clone(), &mut s.g[f_rows.clone()])?;
        layer
            .up
            .forward_rows(&s.h[..h], f_rows.clone(), &mut s.u[f_rows.clone()])?;
        m.clock.lap(Phase::GateUp);
        swiglu(&mut s.g[f_rows.clone()], &s.u[f_rows.clone()]);
        m.clock.lap(Phase::Other);
        m.exchange.all_gather(m.t, &mut m.round, f_rows, &mut s.g)?;
        m.clock.lap(Phase::Waits);
        self.rotate_inputs(&mut s.g, Width::Ffn);
        m.clock.lap(Phase::Norms);
        layer
            .down
            .forward_rows(&s.g, h_rows.clone(), &mut s.o[h_rows.clone()])?;
        m.clock.lap(Phase::Down);
        m.exchange.all_gather(m.t, &mut m.round, h_rows, &mut s.o)?;
        m.clock.lap(Phase::Waits);
        s.x.iter_mut().zip(&s.o).for_each(|(x, d)| *x += d);
        m.clock.lap(Phase::Other);
        Ok(())
    }
}

/// One layer's cached keys or values, as the cache holds them.
type LayerCache = RwLock<LayerKv>;

/// One thread's part of a team step: its shares of every layer (query
/// heads and their rows, K and V rows, hidden and FFN rows), the position
/// and its RoPE rows, the cache and the meeting place, its exchange count
/// and its clock.
struct Member<'a> {
    t: usize,
    pos: usize,
    capacity: usize,
    heads: Range<usize>,
    q_rows: Range<usize>,
    kv_rows: Range<usize>,
    h_rows: Range<usize>,
    f_rows: Range<usize>,
    caches: &'a [LayerCache],
    /// The position's `cos` and `sin` rows ([`Model::rope_rows`]).
    rope: (&'a [f32], &'a [f32]),
    exchange: &'a Exchange,
    round: usize,
    clock: Clock<'a>,
}

/// Readies `cache` for a team step of `threads`: one scratch set per thread
/// (each sized for one row at the cache's next position) and an exchange
/// for that many, kept while the team's size stays; profile counters
/// started again when it changes.
fn prepare_team(cache: &mut KvCache, c: &Config, threads: usize) {
    let pos = cache.len;
    if cache.team.len() != threads {
        cache.team = (0..threads).map(|_| Mutex::new(Scratch::default())).collect();
        cache.exchange = Exchange::new(threads);
    }
    if let Some(p) = cache.profile.as_mut().filter(|p| p.len() != threads) {
        // a new team size starts the count again
        *p = counters(threads);
        cache.profiled_steps = 0;
    }
    cache.exchange.reset();
    for local in &mut cache.team {
        local
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .resize(1, pos + 1, c, 1);
    }
}

/// The team's result: the first thread's own error, not the others'
/// report of it ([`Error::TeamAborted`]), else success.
fn first_error(results: Vec<Result<()>>) -> Result<()> {
    if let Some(e) = results
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, Error::TeamAborted)))
    {
        return Err(results
            .into_iter()
            .nth(e)
            .and_then(Result::err)
            .unwrap_or(Error::TeamAborted));
    }
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}
