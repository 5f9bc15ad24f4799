"""Tasks from the server itself: `generate` (verified tasks and a held-out split, `toolgym tasks generate`),
`sampling` (schema-valid arguments from value pools), `templates` (prompts over tool and parameter descriptions),
and `rewards` (the `correct` reward of generated tasks). The recipe from a server to a trained agent
(`toolgym tasks train`) builds on training and lives in `toolgym.train.recipe`. Import-light: no torch here."""
