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
        let (kv_dim, group) = (c.kv_heads * hd, c.heads / c.kv_heads);
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
        let KvCache {
            k: k_cache,
            v: v_cache,
            team,
            exchange,
            profile,
            ..
        } = &*cache;
        let step = |t: usize| -> Result<()> {
            let mut clock = Clock::new(profile.as_ref().map(|p| &p[t]));
            let running = AbortUnlessDone::new(exchange.barrier());
            let mut local = team[t].lock().unwrap_or_else(PoisonError::into_inner);
            let s = &mut *local;
            let mut round = 0;
            let heads = share_items(c.heads, t, threads);
            let q_rows = heads.start * hd..heads.end * hd;
            let kv_rows = share(kv_dim, t, threads);
            let h_rows = share(h, t, threads);
            let f_rows = share(c.ffn, t, threads);
            self.embed_row(token, &mut s.x)?;
            for (l, layer) in self.layers.iter().enumerate() {
                rms_norm(&s.x, &layer.attn_norm, c.eps, &mut s.h[..h]);
                clock.lap(Phase::Other);
                layer
                    .q
                    .forward_rows(&s.h[..h], q_rows.clone(), &mut s.q[q_rows.clone()])?;
                layer
                    .k
                    .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.k[kv_rows.clone()])?;
                layer
                    .v
                    .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.v[kv_rows.clone()])?;
                clock.lap(Phase::Projections);
                self.rotate(&mut s.q, q_rows.clone(), pos);
                self.rotate(&mut s.k, kv_rows.clone(), pos);
                {
                    let mut kc = k_cache[l].write().unwrap_or_else(PoisonError::into_inner);
                    store_kv(&mut kc, &s.k, kv_rows.clone(), hd, capacity, pos);
                    drop(kc);
                    let mut vc = v_cache[l].write().unwrap_or_else(PoisonError::into_inner);
                    store_kv(&mut vc, &s.v, kv_rows.clone(), hd, capacity, pos);
                }
                clock.lap(Phase::Other);
                // every thread's keys and values of this position are held
                exchange.barrier().wait()?;
                clock.lap(Phase::Waits);
                {
                    let kc = k_cache[l].read().unwrap_or_else(PoisonError::into_inner);
                    let vc = v_cache[l].read().unwrap_or_else(PoisonError::into_inner);
                    let held = Held {
                        k: &kc,
                        v: &vc,
                        capacity,
                        span: pos + 1,
                    };
                    for head in heads.clone() {
                        let (qh, o) = (&s.q[head * hd..(head + 1) * hd], &mut s.att[head * hd..(head + 1) * hd]);
                        attend(hd, pos, qh, &held, head / group, o, &mut s.scores);
                    }
                }
                clock.lap(Phase::Attention);
                exchange.all_gather(t, &mut round, q_rows.clone(), &mut s.att)?;
                clock.lap(Phase::Waits);
                layer.o.forward_rows(&s.att, h_rows.clone(), &mut s.o[h_rows.clone()])?;
                clock.lap(Phase::Projections);
                exchange.all_gather(t, &mut round, h_rows.clone(), &mut s.o)?;
                clock.lap(Phase::Waits);
                s.x.iter_mut().zip(&s.o).for_each(|(x, o)| *x += o);
                rms_norm(&s.x, &layer.ffn_norm, c.eps, &mut s.h[..h]);
                clock.lap(Phase::Other);
                layer
                    .gate
                    .forward_rows(&s.h[..h], f_rows.clone(), &mut s.g[f_rows.clone()])?;
                layer
                    .up
                    .forward_rows(&s.h[..h], f_rows.clone(), &mut s.u[f_rows.clone()])?;
                clock.lap(Phase::Projections);
                swiglu(&mut s.g[f_rows.clone()], &s.u[f_rows.clone()]);
                clock.lap(Phase::Other);
                exchange.all_gather(t, &mut round, f_rows.clone(), &mut s.g)?;
                clock.lap(Phase::Waits);
                layer
                    .down
                    .forward_rows(&s.g, h_rows.clone(), &mut s.o[h_rows.clone()])?;
                clock.lap(Phase::Projections);
                exchange.all_gather(t, &mut round, h_rows.clone(), &mut s.o)?;
                clock.lap(Phase::Waits);
                s.x.iter_mut().zip(&s.o).for_each(|(x, d)| *x += d);
            }
            rms_norm(&s.x, &self.norm, c.eps, &mut s.h[..h]);
            clock.lap(Phase::Other);
            let v_rows = share(c.vocab, t, threads);
            self.head
                .forward_rows(&s.h[..h], v_rows.clone(), &mut s.logits[v_rows])?;
            clock.lap(Phase::Head);
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
        // the first thread's own error, not the others' report of it
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
        results.into_iter().collect::<Result<Vec<()>>>()?;
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
}
