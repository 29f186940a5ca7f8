//! CPU priority: the work of an import runs below live events'.
//!
//! On a machine whose cores are all busy, the scheduler then gives the live path (ingest,
//! the enricher's live lane) the CPU first, and the import what is left: an import is
//! as fast as before on an idle machine and slows down, instead of live events, on a
//! busy one. Linux keeps a nice value per thread; the threads a thread starts afterwards
//! inherit it.

/// Lowers the calling thread's priority to `nice` (up to 19), never raising it: a
/// thread already at `nice` or lower priority is left as it is. Lowering needs no
/// privilege; a failure is logged, and the work goes on at the priority it had.
pub fn lower_this_thread(nice: i32) {
    let current = rustix::process::getpriority_process(None).unwrap_or(0);
    if nice <= current {
        return;
    }
    if let Err(e) = rustix::process::setpriority_process(None, nice.min(19)) {
        tracing::warn!(error = %e, nice, "cannot lower this thread's CPU priority");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_lowers_its_own_priority_only() {
        let before = rustix::process::getpriority_process(None).unwrap();
        let inside = std::thread::spawn(|| {
            super::lower_this_thread(7);
            let own = rustix::process::getpriority_process(None).unwrap();
            // A thread started from here inherits it.
            let child = std::thread::spawn(|| rustix::process::getpriority_process(None).unwrap())
                .join()
                .unwrap();
            (own, child)
        })
        .join()
        .unwrap();
        assert_eq!(inside, (before.max(7), before.max(7)));
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), before);
    }
}
