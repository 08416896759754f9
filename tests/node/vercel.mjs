// The Vercel AI SDK (`ai` + `@ai-sdk/openai`), unmodified, against our server. It prints one JSON line on stdout
// with what the SDK itself reported and every request it sent; tests/test_clients_node.py makes the assertions.
//
//   node tests/node/vercel.mjs generate|stream '{"baseURL", "model", "prompt", "tool", "toolResults"}'
//   node tests/node/vercel.mjs conversation '{"baseURL", "model", "first", "second"}'
//
// `tool` is the Responses API tool (the fixture's WEATHER_TOOL) and `toolResults` maps a city to what the tool
// returns for it. Both come from the Python side, so the server renders exactly the prompts the fixture model was
// trained on.

import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

const [mode, rawConfig] = process.argv.slice(2);
const config = JSON.parse(rawConfig ?? "{}");

// Every request the SDK sends, and the status it got back. The test checks the tool the SDK sent, and
// docs/clients.md lists the request features the SDK uses.
const requests = [];
async function loggingFetch(url, init) {
  const response = await fetch(url, init);
  requests.push({ url: String(url), status: response.status, body: init?.body ? JSON.parse(init.body) : null });
  return response;
}

const provider = createOpenAI({ baseURL: config.baseURL, apiKey: "-", fetch: loggingFetch });
const model = provider(config.model); // `provider(id)`, like the default `openai(id)`, uses the Responses API
const executed = []; // the inputs the SDK passed to `execute`: the arguments it parsed from the model's calls

function weatherTools() {
  return {
    [config.tool.name]: tool({
      description: config.tool.description,
      // `jsonSchema` sends the schema unchanged. A zod schema would add `$schema` and `additionalProperties: false`,
      // and the prompt would no longer be the trained one. `strict` is not set, so the SDK leaves it out of the
      // request (as LangChain does).
      inputSchema: jsonSchema(config.tool.parameters),
      execute: async (input) => {
        executed.push(input);
        return config.toolResults[input.city]; // a string goes back unchanged as the function_call_output's `output`
      },
    }),
  };
}

function toolLoop() {
  // stepCountIs(2) runs the SDK's own loop: the model calls the tool, the SDK runs it, then the model answers.
  return { model, prompt: config.prompt, tools: weatherTools(), stopWhen: stepCountIs(2), maxRetries: 0 };
}

function steps(list) {
  return list.map((step) => ({
    finishReason: step.finishReason,
    text: step.text,
    toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
    toolResults: step.toolResults.map((result) => ({ toolName: result.toolName, output: result.output })),
    responseId: step.response?.id ?? null,
  }));
}

async function runGenerate() {
  const result = await generateText(toolLoop());
  return { text: result.text, finishReason: result.finishReason, steps: steps(result.steps), warnings: result.warnings };
}

async function runStream() {
  // includeRawChunks: the SDK also yields each SSE event it parsed, so the test sees the event sequence.
  // onError: an error is still a part of the stream, but the SDK no longer logs it to stderr as well.
  const result = streamText({ ...toolLoop(), includeRawChunks: true, onError: () => {} });
  const parts = {}; // part type -> how many
  const events = []; // the SSE event types, in order
  const errors = [];
  for await (const part of result.fullStream) {
    if (part.type === "raw") {
      events.push(part.rawValue?.type ?? "?");
      continue;
    }
    parts[part.type] = (parts[part.type] ?? 0) + 1;
    if (part.type === "error") errors.push(String(part.error?.message ?? part.error));
  }
  return {
    text: await result.text, finishReason: await result.finishReason, steps: steps(await result.steps),
    warnings: await result.warnings, parts, events, errors,
  };
}

async function runConversation() {
  // Two ways of continuing a conversation: resending the history (with the SDK's default store=true, the assistant
  // message goes back as an `item_reference`), and `previousResponseId`.
  const first = await generateText({ model, prompt: config.first, maxRetries: 0 });
  const history = await generateText({
    model, maxRetries: 0,
    messages: [{ role: "user", content: config.first }, ...first.response.messages, { role: "user", content: config.second }],
  });
  const chained = await generateText({
    model, prompt: config.second, maxRetries: 0, providerOptions: { openai: { previousResponseId: first.response.id } },
  });
  return {
    firstId: first.response.id,
    texts: [first.text, history.text, chained.text],
    finishReasons: [first.finishReason, history.finishReason, chained.finishReason],
  };
}

const modes = { generate: runGenerate, stream: runStream, conversation: runConversation };
try {
  if (!(mode in modes)) throw new Error(`unknown mode ${mode}; one of ${Object.keys(modes).join(", ")}`);
  const result = await modes[mode]();
  console.log(JSON.stringify({ ok: true, mode, ...result, executed, requests }));
} catch (error) {
  console.log(JSON.stringify({ ok: false, mode, error: String(error?.stack ?? error), executed, requests }));
  process.exitCode = 1;
}
