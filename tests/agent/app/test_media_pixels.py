"""Issue 28, item 3: a small file with a huge picture, sent on each channel's fake through
the whole app to a provider's fake. It is never decoded: the model gets a line saying it
was too large (and the rest of the message), the owner gets an answer, the file stays
stored. A big photo within the pixel cap reaches the model downscaled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.agent.app.media_e2e_kit import ChannelName, Provider, Rig, media_rig
from tests.agent.conversation.media_kit import phone_photo
from tests.agent.llm.pixels_kit import bilevel_png, gray_jpeg, size_of
from tests.channels.media_kit import media_of, stored_bytes
from tests.databases import AppDb
from tests.fakes.openai_api import decode_data_url

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession")

HUGE = bilevel_png(9000, 9000)  # 81 megapixels in about 10 kB
HUGE_NOTE = "[photo of 9000x9000 pixels: too large to look at; limit 40 megapixels]"


def user_text(rig: Rig, index: int) -> str:
    if rig.provider == "gemini":
        return "\n".join(rig.gemini.user_texts(index))
    return rig.openai.user_text(index)


def images_sent(rig: Rig, index: int) -> list[tuple[str, bytes]]:
    if rig.provider == "gemini":
        return rig.gemini.inline_data(index)
    return [decode_data_url(url) for url in rig.openai.image_urls(index)]


def raw_request(rig: Rig, index: int) -> str:
    fake = rig.gemini if rig.provider == "gemini" else rig.openai
    return json.dumps(fake.bodies[index])


@pytest.mark.parametrize(
    ("channel", "provider"), [("telegram", "openai"), ("whatsapp", "gemini"), ("sms", "openai")]
)
async def test_a_photo_with_too_many_pixels_is_named_not_decoded_and_answered(
    app_db: AppDb, tmp_path: Path, channel: ChannelName, provider: Provider
) -> None:
    async with media_rig(app_db, tmp_path, channel, provider) as rig:
        db, driver = rig.app.deps.db, rig.driver
        rig.answer("That photo is too large for me; can you send a smaller one?")
        external_id = await rig.exchange(lambda: driver.photo(HUGE, "what is this?"))
        assert driver.replies() == ["That photo is too large for me; can you send a smaller one?"]
        [item] = await media_of(db, external_id=external_id)
        assert await stored_bytes(db, item) == HUGE  # kept: nothing the owner sent is lost
        text = user_text(rig, 0)
        assert "what is this?" in text and HUGE_NOTE in text
        assert images_sent(rig, 0) == []
        assert not re.search(r"inlineData|inline_data|image_url|base64", raw_request(rig, 0))
        rig.answer("Noted.")
        await rig.exchange(lambda: driver.text("and now?"))
        assert HUGE_NOTE in user_text(rig, 1) and "and now?" in user_text(rig, 1)


@pytest.mark.parametrize("provider", ["gemini", "openai"])
async def test_a_big_photo_within_the_cap_is_downscaled_one_past_it_is_not_decoded(
    app_db: AppDb, tmp_path: Path, provider: Provider
) -> None:
    settings = {"media_max_pixels": 12_000_000, "media_image_max_edge": 1568}
    async with media_rig(app_db, tmp_path, "telegram", provider, settings) as rig:
        driver = rig.driver
        rig.answer("A blue wall.")
        await rig.exchange(lambda: driver.photo(phone_photo((4000, 3000)), "and this?"))
        [(mime, sent)] = images_sent(rig, 0)
        assert mime == "image/jpeg" and size_of(sent) == (1568, 1176)
        rig.answer("Too large, sorry.")
        await rig.exchange(lambda: driver.photo(gray_jpeg(4001, 3000), "and that?"))
        assert images_sent(rig, 1) == []
        note = "[photo of 4001x3000 pixels: too large to look at; limit 12 megapixels]"
        assert "and that?" in user_text(rig, 1) and note in user_text(rig, 1)
        assert driver.replies() == ["A blue wall.", "Too large, sorry."]
