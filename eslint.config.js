// Lint rules. CONTRIBUTING.md says why each departure from the recommended sets exists.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/', '.tap/', 'bench/results/', 'examples/*/dist/', 'examples/*/node_modules/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.node },
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // JSON from clients and providers is `any` at the boundary and checked by schema or guard where
      // it is read; these rules would demand casts that check nothing.
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // The store and plugin interfaces are async; an implementation that needs no await is still one.
      '@typescript-eslint/require-await': 'off',
      // Control characters are the point of the Redis packing separators and the JSON/SSE scanners.
      'no-control-regex': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    // The rooms (docs/architecture.md): the core never reaches up into what is built on it.
    files: ['core/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)(plugins|mock|cli|bench|test|console)/',
              message:
                'core/ must not import from plugins/, mock/, cli/, bench/, test/ or console/: pass what it needs in (see docs/architecture.md; the console is served as files).',
            },
          ],
        },
      ],
    },
  },
  {
    // The web console runs in the browser: it reaches the gateway only through HTTP (the admin API, /v1/usage).
    files: ['console/**/*.{ts,tsx}'],
    languageOptions: { globals: { ...globals.browser } },
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(node:|(\\.\\./)+(core|plugins|mock|cli|bench|test|scripts)/)',
              message: 'console/ runs in the browser: it talks to the gateway over HTTP, never by importing its code.',
            },
          ],
        },
      ],
    },
  },
  {
    // tap tracks its own subtests: `t.test(...)` is not awaited by design.
    files: ['test/**/*.ts', 'examples/**/test/**'],
    rules: { '@typescript-eslint/no-floating-promises': 'off' },
  },
  { files: ['**/*.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
);
