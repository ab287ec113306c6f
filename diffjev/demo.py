"""The demo project's schema: support tickets from a SaaS product, one question of each kind."""

TICKETS_SCHEMA = {
    "instructions": "Support tickets from a SaaS product.",
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {"id": "team", "type": "choice", "instructions": "Which team should handle it?",
         "options": [{"name": "billing"}, {"name": "technical", "description": "bugs, outages"}, {"name": "account"}]},
        {"id": "tone", "type": "score", "instructions": "How upset is the customer?",
         "levels": ["calm", "annoyed", "furious"]},
    ],
}
