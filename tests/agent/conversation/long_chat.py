"""A long everyday chat with the owner, played by a scripted model that is both the chat
model and the summariser (tests/agent/conversation/test_summary.py, bench/bench_history.py).

Each exchange is of realistic length (the owner writes two or three sentences, the
answer four or five); every fourth one looks something up first (``db_query``). In the
third the owner and Watchkeeper agree when the plumber comes. The summariser does what a
model asked for the thread would: it keeps the summary so far and adds what the new
messages agreed, with a line for the rest.
"""

from __future__ import annotations

import json

from agent.conversation.history import message_text
from agent.conversation.summary import SUMMARY_SYSTEM
from agent.llm.types import ModelMessage, ToolResultPart
from tests.fakes.scripted import Request, Responder, ScriptedModel
from tests.tokens import count_tokens

AGREEMENT = "we agreed the plumber comes on the 3rd"
PLUMBER = (
    "The plumber called back: he can come on the 3rd in the morning, or the week after. "
    "The 3rd suits me better because of the leak under the sink. Is that fine?"
)
TOPICS = [
    "Can you look at what I have on Thursday afternoon? I might move the dentist if "
    "the meeting with Anna runs long, and I still need to buy a present for Tom.",
    "The heating in the study is making that ticking noise again. Last winter it stopped "
    "after we bled the radiators; remind me how we did that and whether it helped.",
    "I've been thinking about the holiday in May. Portugal or the Dolomites? I want "
    "somewhere quiet with walks, not too far from an airport, and a decent kitchen.",
    "Work is hectic this week. Could you keep an eye on the backup alerts and only wake "
    "me if the disk really fills up? The warnings about 80% can wait until morning.",
    "My sister asked whether we can host her family over Easter. We have the guest room "
    "and the sofa bed; four people for five nights. What would we need to sort out?",
]
ANSWERS = [
    "Thursday afternoon has the meeting with Anna from 14:00 to 15:30 and the dentist at "
    "16:15. If the meeting runs long you would have about 45 minutes to get there, which "
    "is tight but doable by bike. I can move the dentist to Friday at 09:00 if you like; "
    "for Tom, the bookshop near the office closes at 19:00.",
    "Last winter we bled the radiators from the top floor down, starting with the one in "
    "the study, and topped up the pressure to 1.5 bar afterwards. The ticking stopped for "
    "about three months. If it is back, the pressure has probably dropped again; check the "
    "gauge by the boiler first and tell me what it says.",
    "Both fit what you describe. The Dolomites in May are quiet but some huts are still "
    "closed; the Alentejo coast in Portugal is warm, flat and near Lisbon airport. If the "
    "walks matter most, I would pick the Dolomites after the 20th; shall I draft a short "
    "list of places with kitchens for each?",
    "Understood: backup alerts below critical wait until 07:00, and a disk filling up "
    "still wakes you. I'll keep the 80% warnings for the morning summary. If you want, I "
    "can also tell you which folders grew most this week so you can clean them up first.",
    "For four people over five nights you'd need bedding for the sofa bed, towels, and "
    "probably a second set of keys. The guest room fits the parents; the kids could take "
    "the sofa bed. Shall I add a shopping list and a reminder to ask about allergies?",
]

FOLLOW_UPS = [
    "One more thing for Thursday: the parking garage by the dentist closes at 18:00, so "
    "if you go by car, leave it at the station instead. Tom mentioned last month that he "
    "wanted the new book by the author he met in Hamburg; the bookshop has it in stock, "
    "and they wrap presents for free if you ask at the counter.",
    "If the gauge shows less than 1.0 bar, open the filling valve under the boiler slowly "
    "until it reads 1.5, then close it firmly. Should it drop again within a week, there "
    "is probably a small leak somewhere, and then it is worth asking the heating firm to "
    "look at the valves before the cold weeks in January start.",
    "Flights to Lisbon from here are about three hours, to Venice or Innsbruck a little "
    "less, and both have trains onwards. May prices are still moderate if you book before "
    "February. Tell me your dates and budget and I will compare two or three places each, "
    "with the walks nearby and how far the nearest shop is.",
    "The disk on the backup server is at 71% now and grew about 2% a week over the last "
    "month, mostly from the photo archive. At that pace it reaches 90% in roughly nine "
    "weeks, so there is no hurry, but moving the old camera folders to the archive drive "
    "would buy several months.",
    "For Easter itself, the shops are closed on Friday and Monday, so the big shopping "
    "should be done by Thursday. If they arrive by train, the station is twenty minutes "
    "away by bus. I can also look up what is on in town that weekend for the kids, like "
    "the Easter market or the museum's workshop.",
]


def owner_words(n: int) -> str:
    """The owner's ``n``th message (from 0): the plumber in the third, else a topic."""
    return PLUMBER if n == 2 else f"({n}) {TOPICS[n % len(TOPICS)]}"


def chat_answer(req: Request, model: ScriptedModel) -> ModelMessage | str:
    """The chat model: a lookup first every fourth exchange, then an answer."""
    newest = req.messages[-1]
    if newest.role == "user":
        words = newest.text
        if words == PLUMBER:
            return f"Yes, that works: {AGREEMENT}, in the morning. I'll remind you the day before."
        n = int(words[1 : words.index(")")]) if words.startswith("(") else 0
        if n % 4 == 3:
            return model.call("db_query", operation="find", collection="schedule", limit=5)
        return answer(n)
    return answer(len(req.messages))


def answer(n: int) -> str:
    """An answer of four paragraphs' length on the ``n``th topic."""
    return f"{ANSWERS[n % len(ANSWERS)]}\n\n{FOLLOW_UPS[n % len(FOLLOW_UPS)]}"


def summarise(req: Request) -> str:
    """The summariser: the summary so far, then each new line that agreed something."""
    asked = req.messages[-1].text
    so_far, new = asked.split("\n\nNew messages:\n", 1)
    lines = [] if "(none yet)" in so_far else so_far.split("\n", 1)[1].splitlines()
    agreed = [line.split(": ", 1)[1] for line in new.splitlines() if "agreed" in line]
    lines += agreed or [f"Talked about {new.count('Owner: ')} more everyday things."]
    return "\n".join(lines)


def is_summary(req: Request) -> bool:
    return req.system == SUMMARY_SYSTEM


def player(model: ScriptedModel) -> Responder:
    """One responder for both: the summariser for summary requests, else the chat."""

    def respond(req: Request) -> ModelMessage | str | Exception:
        return summarise(req) if is_summary(req) else chat_answer(req, model)

    return respond


def request_tokens(req: Request) -> int:
    """What the provider is sent, in o200k tokens: the system prompt, every message (its
    text, notes, tool calls and results) and every tool schema."""
    schemas = json.dumps([t.model_dump() for t in req.tools])
    texts = sum(count_tokens(message_text(m)) for m in req.messages)
    return count_tokens(req.system) + texts + count_tokens(schemas)


def carried(req: Request) -> str:
    """Everything a request carries, as one text (to look for words in)."""
    return req.system + "\n" + "\n".join(message_text(m) for m in req.messages)


def results_of(req: Request) -> list[ToolResultPart]:
    return [p for m in req.messages for p in m.parts if isinstance(p, ToolResultPart)]
