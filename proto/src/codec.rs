//! The gRPC codec of `wattflip.v1`: prost encoding with small first buffers. To change how much
//! a stream holds while idle, change [`LEAN_BUFFERS`]; messages larger than it grow the buffer.

use std::marker::PhantomData;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// One KiB for each stream's encode and decode buffer instead of tonic's 8 KiB: a collector holds
/// one stream per agent, and at 10,000 agents sending 8 samples a second (a few hundred bytes a
/// message) the two 8 KiB buffers were 160 MiB of mostly unused memory (heaptrack, docs/benchmarks.md).
/// The yield threshold stays tonic's 32 KiB.
pub const LEAN_BUFFERS: (usize, usize) = (1024, 32 * 1024);

/// [`ProstCodec`] with [`LEAN_BUFFERS`]; named by `proto/build.rs` as the generated code's codec.
#[derive(Debug, Clone, Copy)]
pub struct LeanCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        LeanCodec(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(LEAN_BUFFERS.0, LEAN_BUFFERS.1)
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codec::{Decoder, Encoder};

    #[test]
    fn both_directions_use_the_lean_buffers() {
        let mut c = LeanCodec::<crate::v1::Ack, crate::v1::AgentMessage>::default();
        // BufferSettings keeps its fields private; its Debug form shows them.
        let want = "BufferSettings { buffer_size: 1024, yield_threshold: 32768 }";
        assert_eq!(format!("{:?}", c.encoder().buffer_settings()), want);
        assert_eq!(format!("{:?}", c.decoder().buffer_settings()), want);
    }
}
