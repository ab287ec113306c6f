"""The demo project's schema: support tickets from a SaaS product, one question of each kind."""

TICKETS_SCHEMA = {
    "instructions": "Support tickets from a SaaS product.",
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {
            "id": "team",
            "type": "choice",
            "instructions": "Which team should handle it?",
            "options": [
                {"name": "billing"},
                {"name": "technical", "description": "bugs, outages"},
                {"name": "account"},
            ],
        },
        {
            "id": "tone",
            "type": "score",
            "instructions": "How upset is the customer?",
            "levels": ["calm", "annoyed", "furious"],
        },
    ],
}

# The demo project: the tickets' schema, with each ticket's gold team (`expected_team`, for checking the
# model) kept off the annotator's card so it cannot lead the answer. It stays in the item and its exports.
DEMO_PROJECT_SCHEMA = {**TICKETS_SCHEMA, "hidden_fields": ["expected_team"]}

_OPENINGS = ["Hi team,", "Hello,", "URGENT:", "Hey there,", "Good morning,", "To whom it may concern,"]
_PROBLEMS = [
    ("the whole dashboard is down and nothing loads", "technical"),
    ("I was charged twice for this month's invoice", "billing"),
    ("I cannot reset my password, the link has expired", "account"),
    ("the CSV export has been failing since yesterday", "technical"),
    ("please change the card on file to our new company card", "billing"),
    ("how do I add two more seats for new colleagues?", "account"),
    ("the API returns 500 errors for every request", "technical"),
    ("our refund from last quarter never arrived", "billing"),
    ("I want to transfer ownership of the workspace", "account"),
    ("search results are empty even though the data is there", "technical"),
]
_CLOSINGS = [
    "We have a customer demo at noon, please hurry.",
    "No rush, whenever you get a chance.",
    "This is the third time this month and I am losing patience.",
    "Thanks a lot for your help!",
    "If this is not fixed today we will cancel our plan.",
    "Could you let me know by the end of the week?",
]


def demo_tickets(n: int = 60) -> list[dict[str, str]]:
    """Support tickets for the demo project, written here so the studio has something to label offline."""
    tickets = []
    for i in range(n):
        problem, team = _PROBLEMS[i % len(_PROBLEMS)]
        text = f"{_OPENINGS[i % len(_OPENINGS)]} {problem}. {_CLOSINGS[(i * 7 + i // 10) % len(_CLOSINGS)]}"
        tickets.append({"id": f"demo-{i + 1:03d}", "text": text, "expected_team": team})
    return tickets
