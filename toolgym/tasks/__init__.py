"""Tasks from the server itself: `generate` (verified tasks and a held-out split, `toolgym tasks generate`),
`sampling` (schema-valid arguments from value pools), `templates` (prompts over tool and parameter descriptions),
`rewards` (the `correct` reward of generated tasks) and `recipe` (server to trained agent, `toolgym tasks train`).

Import-light: nothing here loads torch or transformers until the recipe trains."""
