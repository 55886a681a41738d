//! The smallest amnet program: a ring of Short AMs, a put and a barrier.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn main() -> amnet::Result<()> {
    let ep = amnet::init()?;
    let hits = Arc::new(AtomicU32::new(0));
    let mut t = amnet::HandlerTable::new();
    let h = hits.clone();
    t.register(200, move |tok, args, _| {
        h.fetch_add(args[0], Ordering::Relaxed);
        tok.reply_short(201, &[]).unwrap();
    })?;
    let acks = Arc::new(AtomicU32::new(0));
    let a = acks.clone();
    t.register(201, move |_, _, _| {
        a.fetch_add(1, Ordering::Relaxed);
    })?;
    ep.attach(t, 1 << 20)?;
    let next = (ep.rank() + 1) % ep.size();
    ep.request_short(next, 200, &[1])?;
    ep.wait_until(|| hits.load(Ordering::Relaxed) == 1 && acks.load(Ordering::Relaxed) == 1)?;
    ep.put(next, 8, &ep.rank().to_le_bytes())?;
    ep.barrier()?;
    let mut b = [0u8; 4];
    ep.read_local(8, &mut b)?;
    let prev = (ep.rank() + ep.size() - 1) % ep.size();
    assert_eq!(u32::from_le_bytes(b), prev);
    println!("rank {} of {}: ok", ep.rank(), ep.size());
    ep.barrier()?;
    Ok(())
}
