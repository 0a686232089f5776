//! The OpenAPI document (served at /openapi.json, committed as openapi/openapi.json) and the
//! offline API docs page (Swagger UI files built into the binary).

use crate::models::registry;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::Modify;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Voxtral TTS",
        description = "OpenAI-compatible text to speech and speech to text, with the models that \
            /v1/models lists (their `family` and `capabilities`). Clients of OpenAI's audio API \
            (curl, the openai SDKs, chat front-ends) work unchanged: point their base URL at \
            this server's /v1.\n\n\
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

/// Appends the table of OpenAI's voice names and the preset each selects, for every family
/// that maps them (their cards' `voice_aliases`), to the description.
struct VoiceTable;

impl Modify for VoiceTable {
    fn modify(&self, openapi: &mut OpenApi) {
        let families: Vec<&registry::FamilySpec> = registry::families()
            .iter()
            .filter(|f| !f.openai_voices.is_empty())
            .collect();
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in families.iter().flat_map(|f| f.openai_voices) {
            if !names.contains(name) {
                names.push(name);
            }
        }
        let rows: Vec<String> = names
            .iter()
            .map(|name| {
                let presets: Vec<&str> = families
                    .iter()
                    .map(|f| {
                        let preset = f.openai_voices.iter().find(|(n, _)| n == name);
                        preset.map_or("", |(_, preset)| preset)
                    })
                    .collect();
                format!("| {name} | {} |", presets.join(" | "))
            })
            .collect();
        let columns: Vec<&str> = families.iter().map(|f| f.name).collect();
        let table = format!(
            "\n\nOpenAI voice names select these presets, by model family (a model folder without \
             the preset selects nothing; GET /v1/audio/voices lists each model's voices):\n\n\
             | OpenAI voice | {} |\n|---|{}\n{}",
            columns.join(" | "),
            "---|".repeat(columns.len()),
            rows.join("\n")
        );
        let description = openapi.info.description.get_or_insert_with(String::new);
        description.push_str(&table);
    }
}
