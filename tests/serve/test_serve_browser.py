"""The page of plm serve in a real browser (headless Chromium through Selenium) against a server on loopback.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make setup`` installs them where it may); skipped
without them. With ``PLM_SCREENSHOTS=DIR`` each test also saves what the page looked like into DIR.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from plm.serve import BackgroundServer, create_app, load_service
from tests.serve.test_serve import NAMES, model_dirs, released_dirs  # noqa: F401 (fixtures: tiny models of every kind)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="no browser: needs chromium and chromedriver (apt-get install chromium chromium-driver)",
)
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402 (after the skip: selenium is a test extra)
from selenium.webdriver.support.expected_conditions import alert_is_present  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}  # an iPhone 12-14's CSS pixels


@pytest.fixture(scope="module")
def server(model_dirs: Path) -> BackgroundServer:  # noqa: F811
    services = [load_service(model_dirs / name, name, "cpu") for name in NAMES]
    with BackgroundServer(create_app(services)) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def phone(browser):
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    yield browser
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def wait(browser, condition, seconds: float = 20):
    return WebDriverWait(browser, seconds).until(lambda _: condition())


def open_tab(browser, server: BackgroundServer, tab: str) -> None:
    """Load the page afresh and click the tab's button."""
    browser.get(f"{server.url}/")
    wait(browser, lambda: browser.find_elements(By.ID, f"tab-{tab}"))
    browser.find_element(By.ID, f"tab-{tab}").click()
    wait(browser, lambda: browser.find_element(By.ID, f"panel-{tab}").is_displayed())


def run(browser, form: str, **fields: str) -> None:
    """Fill the form's fields (by id suffix), press its button, wait until the answer is in."""
    for name, value in fields.items():
        box = browser.find_element(By.ID, f"{form}-{name}")
        box.clear()
        box.send_keys(value)
    button = browser.find_element(By.ID, f"{form}-run")
    button.click()
    wait(browser, lambda: button.is_enabled())
    error = browser.find_element(By.ID, f"{form}-error")
    assert not error.is_displayed(), error.text


def screenshot(browser, name: str) -> None:
    if os.environ.get("PLM_SCREENSHOTS"):
        browser.save_screenshot(str(Path(os.environ["PLM_SCREENSHOTS"], f"serve-{name}.png")))


def test_the_page_has_a_tab_per_capability_of_the_loaded_models(browser, server: BackgroundServer) -> None:
    open_tab(browser, server, "generate")
    tabs = [button.text for button in browser.find_elements(By.CSS_SELECTOR, "#tabs button")]
    assert tabs == ["Generate", "Fill mask", "Translate", "Attention", "Similarity", "Classify"]
    assert "gpt (causal LM, gpt)" in browser.find_element(By.ID, "models-summary").text


def test_a_prompt_typed_in_the_box_gets_its_continuation_coloured_token_by_token(browser,
                                                                                 server: BackgroundServer) -> None:
    open_tab(browser, server, "generate")
    run(browser, "generate", prompt="The cat", max="12")
    tokens = browser.find_elements(By.CSS_SELECTOR, "#generate-output .token")
    body = {"model": "gpt", "prompt": "The cat", "max_new_tokens": 12}
    expected = httpx.post(f"{server.url}/generate", json=body).json()
    shown = [token.get_attribute("textContent").replace("↵", "") for token in tokens]  # ↵ marks a line break
    assert shown == [t["text"] for t in expected["tokens"]]
    assert browser.find_element(By.ID, "generate-output").text.startswith("The cat")
    assert all(token.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)" for token in tokens)
    screenshot(browser, "generate")


def test_the_translation_tab_draws_the_attention_heatmap(browser, server: BackgroundServer) -> None:
    open_tab(browser, server, "translate")
    run(browser, "translate", text="4 July 1976")
    expected = httpx.post(f"{server.url}/translate", json={"model": "dates", "text": "4 July 1976"}).json()
    assert browser.find_element(By.ID, "translate-output").text == (expected["translation"] or "(empty)")
    rows = browser.find_elements(By.CSS_SELECTOR, "#translate-heatmap tbody tr")
    assert len(rows) == len(expected["target_tokens"])
    cells = browser.find_elements(By.CSS_SELECTOR, "#translate-heatmap td")
    assert len(cells) == len(expected["target_tokens"]) * len(expected["source_tokens"])
    shades = {cell.value_of_css_property("background-color") for cell in cells}
    assert len(shades) > 1  # the weights are drawn, not one colour
    screenshot(browser, "translate")


def test_the_translation_tab_translates_with_a_released_marian_model(browser, released_dirs: dict) -> None:  # noqa: F811
    source = "Ein Mann fährt Fahrrad."
    with BackgroundServer(create_app([load_service(released_dirs["opus-mt"], "opus-mt", "cpu")])) as server:
        open_tab(browser, server, "translate")
        assert "opus-mt (encoder-decoder, transformer)" in browser.find_element(By.ID, "models-summary").text
        run(browser, "translate", text=source)
        expected = httpx.post(f"{server.url}/translate", json={"text": source}).json()
        assert browser.find_element(By.ID, "translate-output").text == (expected["translation"] or "(empty)")
        cells = browser.find_elements(By.CSS_SELECTOR, "#translate-heatmap td")
        assert len(cells) == len(expected["target_tokens"]) * len(expected["source_tokens"]) > 0


def test_the_other_tabs_answer(browser, server: BackgroundServer) -> None:
    """Fill mask, attention (a layer and head to choose), similarity and classify each show their answer."""
    open_tab(browser, server, "fill-mask")
    run(browser, "fill-mask", guesses="3")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#fill-mask-output .bar-row")) == 3
    screenshot(browser, "fill-mask")
    open_tab(browser, server, "attention")
    run(browser, "attention", text="The cat reads the book.")
    layers = browser.find_elements(By.CSS_SELECTOR, "#attention-layer option")
    assert [o.text for o in layers] == ["0", "1"] and browser.find_elements(By.CSS_SELECTOR, "#attention-heatmap td")
    screenshot(browser, "attention")
    open_tab(browser, server, "embed")
    run(browser, "embed")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#embed-output td")) == 9  # 3 sentences x 3
    screenshot(browser, "embed")
    open_tab(browser, server, "classify")
    run(browser, "classify")
    assert "prediction:" in browser.find_element(By.ID, "classify-output").text
    screenshot(browser, "classify")


def test_the_classify_tab_shows_each_tasks_prediction(browser, server: BackgroundServer) -> None:
    """A tagger's tag per word, a QA model's answer and a multiple choice's pick: each answer's "prediction"."""
    open_tab(browser, server, "classify")
    for name, body in (("tagger", {"text": "The cat reads the book."}),
                       ("qa", {"question": "Who reads the book?", "context": "The cat reads the book."}),
                       ("choice", {"context": "The cat reads the book.", "endings": ["the book.", "a value."]})):
        Select(browser.find_element(By.ID, "classify-model")).select_by_value(name)
        run(browser, "classify")
        expected = httpx.post(f"{server.url}/classify", json={"model": name, **body}).json()["prediction"]
        output = browser.find_element(By.ID, "classify-output")
        if name == "tagger":
            shown = [tag.text for tag in output.find_elements(By.CSS_SELECTOR, ".tag small")]
            assert shown == expected
        elif name == "qa":
            assert output.find_element(By.TAG_NAME, "h3").text == f"answer: {expected or '(no answer)'}"
        else:
            assert output.find_element(By.TAG_NAME, "h3").text == f"choice: {expected + 1}"


def test_the_page_fits_a_phones_width(phone, server: BackgroundServer) -> None:
    """At 390 CSS pixels nothing makes the page scroll sideways: a wide heatmap scrolls within its own box."""
    open_tab(phone, server, "translate")
    run(phone, "translate", text="Friday, the fifteenth of March twenty twenty-four")
    assert phone.execute_script("return innerWidth") == 390
    assert phone.execute_script("return document.documentElement.scrollWidth") <= 390
    screenshot(phone, "phone-translate")
    open_tab(phone, server, "generate")
    run(phone, "generate", prompt="The cat")
    assert phone.execute_script("return document.documentElement.scrollWidth") <= 390
    screenshot(phone, "phone-generate")


def test_the_page_asks_for_the_api_key_until_the_server_takes_it_and_keeps_it_for_the_session(
    browser, model_dirs: Path  # noqa: F811
) -> None:
    app = create_app([load_service(model_dirs / "gpt", "gpt", "cpu")], api_key="page-key")
    with BackgroundServer(app) as keyed:  # a port of its own: a session storage of its own
        browser.get(f"{keyed.url}/")
        for given in ("wrong-key", "page-key"):  # a refused key is asked for again
            alert = WebDriverWait(browser, 20).until(alert_is_present())
            alert.send_keys(given)
            alert.accept()
        wait(browser, lambda: "gpt (causal LM, gpt)" in browser.find_element(By.ID, "models-summary").text)
        run(browser, "generate", prompt="The cat", max="4")  # an unexpected question would fail it
        assert browser.find_elements(By.CSS_SELECTOR, "#generate-output .token")
        assert browser.execute_script("return sessionStorage.getItem('plm-api-key')") == "page-key"
