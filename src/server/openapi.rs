//! The OpenAPI document (served at /openapi.json, committed as openapi/openapi.json) and the
//! offline API docs page (Swagger UI files built into the binary).

use crate::models::voxtral_tts::catalog::OPENAI_VOICES;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::Modify;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Voxtral TTS",
        description = "OpenAI-compatible text-to-speech with Mistral's Voxtral-4B-TTS. \
            Clients of OpenAI's speech API (curl, the openai SDKs, chat front-ends) work \
            unchanged: point their base URL at this server's /v1.\n\n\
            Errors always have OpenAI's shape: \
            `{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`.\n\n\
            When the server has `api_keys` configured, /v1 endpoints need \
            `Authorization: Bearer <key>`, except the voice and model lists \
            (/v1/audio/voices, /v1/audio/models) while `public_discovery` is on (the default).",
        license(name = "Apache-2.0")
    ),
    modifiers(&ApiKeyAuth, &VoiceTable),
    tags(
        (name = "audio", description = "Speech synthesis and voices"),
        (name = "models", description = "Model listing"),
        (name = "operations", description = "Health, readiness and metrics"),
    )
)]
pub struct ApiDoc;

struct ApiKeyAuth;

impl Modify for ApiKeyAuth {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Required on /v1 when the server is configured with api_keys.",
                    ))
                    .build(),
            ),
        );
    }
}

/// Appends Voxtral TTS's OpenAI voice mapping, from the table its card carries, to the
/// description.
struct VoiceTable;

impl Modify for VoiceTable {
    fn modify(&self, openapi: &mut OpenApi) {
        let rows: Vec<String> = OPENAI_VOICES
            .iter()
            .map(|(alias, preset)| format!("| {alias} | {preset} |"))
            .collect();
        let table = format!(
            "\n\nWith Voxtral TTS, OpenAI voice names select these presets (all English; the other presets \
             speak Portuguese, Dutch, Italian, French, Spanish, German, Arabic and Hindi):\n\n\
             | OpenAI voice | Preset |\n|---|---|\n{}",
            rows.join("\n")
        );
        let description = openapi.info.description.get_or_insert_with(String::new);
        description.push_str(&table);
    }
}
