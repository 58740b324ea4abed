/**
 * yaml-language-server (the YAML support of VS Code and most editors) run in-process: what an
 * editor shows for a YAML file, schema from its `# yaml-language-server: $schema=…` first line.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);

export interface Diagnostic {
  line: number;
  col: number;
  message: string;
}

let service: any;
// The service caches parsed documents by URI and version: every call is a new version.
let version = 0;

export async function editorDiagnostics(file: string, text = readFileSync(file, 'utf8')): Promise<Diagnostic[]> {
  const { getLanguageService } = require('yaml-language-server');
  const { TextDocument } = require('vscode-languageserver-textdocument');
  service ??= getLanguageService({
    schemaRequestService: async (uri: string) => readFileSync(fileURLToPath(uri), 'utf8'),
    workspaceContext: { resolveRelativePath: (rel: string, resource: string) => new URL(rel, resource).href },
  });
  service.configure({ validate: true, hover: true, completion: true });
  const doc = TextDocument.create(pathToFileURL(file).href, 'yaml', ++version, text);
  const diags = await service.doValidation(doc, false);
  return diags.map((d: any) => ({ line: d.range.start.line + 1, col: d.range.start.character + 1, message: d.message }));
}
