//! `seckill-compensator`: the shared service skeleton around the
//! compensator.

fn main() -> anyhow::Result<()> {
    seckill_shared::ops::host::run::<seckill_compensator::Service>()
}
