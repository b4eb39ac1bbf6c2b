//! `seckill-order`: the shared service skeleton around the order service.

fn main() -> anyhow::Result<()> {
    seckill_shared::ops::host::run::<seckill_order::Service>()
}
