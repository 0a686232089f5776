//! Voxtral TTS behind the engine interface (`crate::engine`).

use super::{catalog, Generation, Noise, SynthError, Voxtral};
use crate::engine::{
    EngineError, ModelCard, PcmSink, PreparedSpeech, SpeechPreparer, SpeechSession, StopReason,
    TextToSpeech,
};
use crate::tensor::Tensor;
use std::sync::Arc;

impl From<SynthError> for EngineError {
    fn from(e: SynthError) -> Self {
        EngineError(e.to_string())
    }
}

impl<T: Tensor> SpeechSession for Generation<'_, T> {
    fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    fn codes(&self) -> &[Vec<u32>] {
        self.frames()
    }

    fn stop_reason(&self) -> Option<StopReason> {
        Generation::stop_reason(self)
    }
}

impl<T: Tensor> TextToSpeech for Voxtral<T> {
    type Session<'m>
        = Generation<'m, T>
    where
        T: 'm;

    fn card(&self) -> ModelCard {
        catalog::card(self.voices(), self.sample_rate(), self.samples_per_frame())
    }

    fn preparer(&self) -> Arc<dyn SpeechPreparer> {
        self.prompter.clone()
    }

    fn free_slots(&self) -> usize {
        Voxtral::free_slots(self)
    }

    fn start_session<'m>(
        &'m self,
        speech: &PreparedSpeech,
        segment: usize,
    ) -> Result<Generation<'m, T>, EngineError> {
        let noise = Noise::Seeded {
            seed: speech.sampling.seed.wrapping_add(segment as u64),
            scale: speech.sampling.noise_scale,
        };
        let ids = speech.segments[segment].prompt.ids.clone();
        let chunk = self.prefill_chunk;
        Ok(self.start_prompt(ids, &speech.voice, speech.max_frames, &noise, chunk)?)
    }

    /// One frame each, or one prefill chunk for a session still prefilling its prompt.
    fn step(&self, batch: &mut [&mut Generation<'_, T>]) -> Result<(), EngineError> {
        Generation::step_batch(batch);
        Ok(())
    }

    fn decode(&self, session: &Generation<'_, T>, from: usize) -> Result<Vec<f32>, EngineError> {
        self.decode_tail(session.frames(), from)
            .map_err(|e| EngineError(e.to_string()))
    }

    fn decode_into(&self, work: Vec<(&Generation<'_, T>, usize, PcmSink)>) {
        let streams: Vec<(&[Vec<u32>], usize)> = work
            .iter()
            .map(|&(session, from, _)| (session.frames(), from))
            .collect();
        match self.decode_tails(&streams) {
            Ok(pcm) => {
                for ((_, _, sink), pcm) in work.into_iter().zip(pcm) {
                    sink.deliver(Ok(pcm));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for (_, _, sink) in work {
                    sink.deliver(Err(EngineError(message.clone())));
                }
            }
        }
    }
}
