// @ts-check
// An error about one field of a form is shown at that field, not as a banner over the page.
// The REST API names the field of a body it refuses (`field` in its answer, beside `code` and
// `message`); a form maps that name to its input, marks the input invalid and describes it by
// the message, as the submit page does with a job's problems (.field.invalid, .problem).
import { el } from "./common.js";

/**
 * Every field error of `form` cleared.
 * @param {HTMLFormElement} form
 */
export function clearFieldErrors(form) {
  for (const problem of form.querySelectorAll(".problem[data-field-error]")) {
    const box = problem.parentElement;
    box?.classList.remove("invalid");
    for (const input of box ? box.querySelectorAll("[aria-invalid]") : []) {
      input.removeAttribute("aria-invalid");
      input.removeAttribute("aria-describedby");
    }
    problem.remove();
  }
}

/**
 * `message` shown at the input named `name` of `form`; false when the form has no such input.
 * @param {HTMLFormElement} form
 * @param {string} name
 * @param {string} message
 */
export function showFieldError(form, name, message) {
  const input = /** @type {HTMLElement | null} */ (form.querySelector(`[name="${CSS.escape(name)}"]`));
  if (!input) return false;
  const box = input.closest(".field") || input.parentElement;
  if (!box) return false;
  const id = `${input.id || name}-error`;
  box.querySelector(".problem[data-field-error]")?.remove();
  box.classList.add("invalid");
  box.append(el("div", { class: "problem", id, "data-field-error": name }, message));
  input.setAttribute("aria-invalid", "true");
  input.setAttribute("aria-describedby", id);
  return true;
}

/**
 * An API error shown at the field it names, when `form` has that field (`names` maps the API's
 * field names to the form's where they differ); false otherwise: the caller shows it as a
 * message of the page.
 * @param {HTMLFormElement} form
 * @param {any} error
 * @param {Record<string, string>} [names]
 * @param {string} [message] what to say instead of the API's message
 */
export function showApiFieldError(form, error, names = {}, message) {
  const field = error && error.body && typeof error.body.field === "string" ? error.body.field : "";
  if (!field) return false;
  const hint = error.body.hint ? ` ${error.body.hint}` : "";
  // Said at the field, the message need not name it: "newPassword must be ..." reads "Must be ...".
  const said = String(error.message);
  const text = said.startsWith(`${field} `) ? said.charAt(field.length + 1).toUpperCase() + said.slice(field.length + 2) : said;
  return showFieldError(form, names[field] || field, message || `${text}${hint}`);
}
