"""The operator console in a real headless browser (Debian's chromium through chromedriver, driven by Selenium)
against a running ``memesh serve``, logged in through the real OpenID provider (npm oidc-provider).

An operator logs in, issues an agent (the key shown once works on /v1), revokes it (the key stops working),
previews and confirms an erase (the certificate is shown), and watches a live walk appear in the observatory's
picture; a ProjectAdmin of another tenant never sees that tenant's walks. The page runs under its strict CSP:
any CSP violation or script error in the browser's log fails the test.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from actors.propagation import diff_id_of
from tests.servers import OidcProvider, Server

WAIT_S = 30


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the test command installs Debian's chromium and chromium-driver (Makefile: browser)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(service=Service(driver), options=options)
    session.set_page_load_timeout(WAIT_S)
    try:
        yield session
        # A CSP violation or a script error; failed loads ("network": the expected 401 of /admin/api/me before
        # the login, the provider's page asking for web fonts with no internet here) are not the page's fault.
        problems = [e for e in session.get_log("browser") if e["level"] == "SEVERE" and e.get("source") != "network"]
        assert not problems, problems
    finally:
        session.quit()


def wait_for(browser: WebDriver, condition: Any, timeout_s: float = WAIT_S) -> Any:
    """Until ``condition`` holds; an element the page re-rendered while it was read is looked up again."""
    return WebDriverWait(browser, timeout_s, ignored_exceptions=(StaleElementReferenceException,)).until(condition)


def left_the_page(element: WebElement) -> bool:
    """Whether ``element`` is no longer in the page's document. While the page navigates away, chromedriver may
    answer a stale node with "Node with given id does not belong to the document" (an ``unknown error``) instead
    of a stale element reference: that is the same answer."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


def visible(browser: WebDriver, css: str) -> WebElement:
    element: WebElement = wait_for(browser, ec.visibility_of_element_located((By.CSS_SELECTOR, css)))
    return element


def log_in(browser: WebDriver, server: Server, subject: str) -> None:
    """/admin -> Log in -> the provider's login page (any password) -> consent -> back at /admin, signed in."""
    browser.delete_all_cookies()
    browser.get(f"{server.base_url}/admin")
    visible(browser, "#login-link").click()
    for _ in range(6):  # the provider's pages: login, then consent
        if browser.current_url.startswith(f"{server.base_url}/admin"):
            break
        form = visible(browser, "form")
        fields = browser.find_elements(By.CSS_SELECTOR, "input[name=login]")
        if fields:
            fields[0].send_keys(subject)
            browser.find_element(By.CSS_SELECTOR, "input[name=password]").send_keys("any password")
        form.find_element(By.CSS_SELECTOR, "button[type=submit], input[type=submit]").click()
        wait_for(browser, lambda b, before=form: b.find_elements(By.CSS_SELECTOR, "form") == [] or left_the_page(before))
    wait_for(browser, ec.text_to_be_present_in_element((By.ID, "who"), "Signed in as"))


def operator(server: Server, provider: OidcProvider, tenant: str, role: str) -> str:
    subject = f"browser-{role.lower()}-{uuid.uuid4().hex[:8]}"
    server.issue(tenant, role, subject, "--oidc-subject", subject)
    return subject


def tab(browser: WebDriver, view: str) -> None:
    browser.find_element(By.CSS_SELECTOR, f"#tabs button[data-view={view}]").click()
    visible(browser, f"#view-{view}")


def agent_row(browser: WebDriver, tenant: str) -> Any:
    """The agents table's row of ``tenant``'s agent (None until it is shown)."""
    return next((r for r in browser.find_elements(By.CSS_SELECTOR, "#agents tbody tr") if tenant in r.text), None)


def write_cell(server: Server, key: str, content: str, project: str = "default") -> str:
    with httpx.Client(base_url=server.base_url, headers={"x-service-key": key}, timeout=60) as http:
        r = http.post("/v1/cells", json={"content": content, "cell_type": "Fact", "salience": 0.8, "project_id": project})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def test_an_operator_issues_revokes_erases_and_watches_a_live_walk(
    admin_server: Server, oidc_provider: OidcProvider, browser: WebDriver
) -> None:
    tenant = f"browser-{uuid.uuid4().hex[:6]}"
    log_in(browser, admin_server, operator(admin_server, oidc_provider, "system", "ServiceAdmin"))
    assert browser.execute_script("return document.querySelector('script:not([src])')") is None  # no inline code
    visible(browser, "#agents tbody tr")  # the agents screen loaded

    # issue an agent: its key is shown once and works
    form = browser.find_element(By.ID, "issue")
    form.find_element(By.NAME, "tenant_id").send_keys(tenant)
    form.find_element(By.NAME, "display_name").send_keys("browser-agent")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    secret = wait_for(browser, lambda b: b.find_element(By.ID, "secret-value").get_attribute("value"))
    assert secret.startswith("msh_")
    browser.find_element(By.ID, "secret-done").click()
    cell_id = write_cell(admin_server, secret, "the browser agent keeps its notes in project tmp", "tmp")

    # revoke it from its row: the key stops working
    row = wait_for(browser, lambda b: agent_row(b, tenant))  # the table re-rendered after the issue
    row.find_element(By.CSS_SELECTOR, "button[aria-label='Revoke browser-agent']").click()
    wait_for(browser, ec.alert_is_present()).accept()
    wait_for(browser, lambda b: "revoked" in agent_row(b, tenant).text)
    with httpx.Client(base_url=admin_server.base_url, headers={"x-service-key": secret}, timeout=30) as http:
        assert http.get("/v1/cells").status_code == 401

    # erase the project: a dry run first, then the typed confirmation, then the certificate
    tab(browser, "data")
    erase = browser.find_element(By.ID, "erase")
    erase.find_element(By.NAME, "kind").send_keys("project")
    erase.find_element(By.NAME, "id").send_keys("tmp")
    erase.find_element(By.NAME, "tenant_id").send_keys(tenant)
    erase.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    visible(browser, "#erase-preview")
    assert "nodes removed" in browser.find_element(By.ID, "erase-counts").text
    go = browser.find_element(By.ID, "erase-go")
    assert not go.is_enabled()
    browser.find_element(By.ID, "erase-confirm").send_keys("project:tm")
    assert not go.is_enabled()  # only the exact label arms it
    browser.find_element(By.ID, "erase-confirm").send_keys("p")
    assert go.is_enabled()
    go.click()
    visible(browser, "#erase-certificate")
    digest = browser.find_element(By.ID, "erase-digest").get_attribute("value") or ""
    assert digest.count(".") == 2  # a compact JWS
    writer = admin_server.issue(tenant, "Writer", "second-writer")["plaintext_secret"]
    with httpx.Client(base_url=admin_server.base_url, headers={"x-service-key": writer}, timeout=30) as http:
        assert http.get(f"/v1/cells/{cell_id}").status_code == 404  # erased

    # the observatory: a live walk appears in the picture
    tab(browser, "observatory")
    browser.find_element(By.ID, "obs-live").click()
    wait_for(browser, ec.text_to_be_present_in_element((By.ID, "obs-status"), "live tail open"))
    walked = diff_id_of(write_cell(admin_server, writer, "the live walk of the browser test"))
    figure = visible(browser, f"figure.walk[data-diff='{walked}']")
    assert tenant in figure.text and figure.find_elements(By.CSS_SELECTOR, "svg circle.hop")
    assert "hops" in (figure.find_element(By.CSS_SELECTOR, "svg").get_attribute("aria-label") or "")


def test_a_project_admin_never_sees_another_tenants_walks(
    admin_server: Server, oidc_provider: OidcProvider, browser: WebDriver
) -> None:
    mine, theirs = f"pa-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    their_key, my_key = (admin_server.issue(t, "Writer", "w")["plaintext_secret"] for t in (theirs, mine))
    their_walk = diff_id_of(write_cell(admin_server, their_key, "their secret walk"))
    my_walk = diff_id_of(write_cell(admin_server, my_key, "our own walk"))
    log_in(browser, admin_server, operator(admin_server, oidc_provider, mine, "ProjectAdmin"))
    tab(browser, "observatory")
    for _ in range(20):  # replay until our own walk is in the retained window (bounded)
        browser.find_element(By.ID, "obs-replay").click()
        try:
            wait_for(browser, ec.presence_of_element_located((By.CSS_SELECTOR, f"figure.walk[data-diff='{my_walk}']")), 3)
            break
        except TimeoutException:
            continue
    shown = {f.get_attribute("data-diff") for f in browser.find_elements(By.CSS_SELECTOR, "figure.walk")}
    assert my_walk in shown and their_walk not in shown
    assert all(mine in f.text for f in browser.find_elements(By.CSS_SELECTOR, "figure.walk h3"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#view-agents #agents tbody tr")
    assert all(theirs not in r.get_attribute("textContent") for r in rows)  # nor its agents
