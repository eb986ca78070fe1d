-- A memory's row stays in its heap page, embedding included (issue 13: single-call latency on
-- ordinary texts).
--
-- PostgreSQL moves a row's long values to its TOAST table once the row passes 2 kB, the largest
-- first among those allowed out of line. pgvector's `vector` is EXTERNAL by default, and a
-- 384-dim embedding is 1,544 bytes: with the text and its two search vectors beside it, a text
-- of 90 characters or more passes 2 kB (measured on benchmark texts: 80 stay, 90 go), and its
-- embedding goes first. 71 % of LoCoMo's turns are that long. Every distance computed on such a row then reads the TOAST
-- table's index and a page of it: the exact scan of a small scope, the distance of each candidate,
-- the order of an entity's matches. The benchmark world's texts (about 60 characters) never
-- passed 2 kB, so no benchmark saw it.
--
-- - toast_tuple_target 8160 (its maximum): a row is left whole up to a page's size; beyond, the
--   largest values (a long text's search vectors and content) are compressed or moved first.
-- - The embedding is MAIN: kept in the row unless nothing else can make the row fit.
--
-- Measured on a 600-fact scope of texts of 122 characters (three benchmark facts joined), the same
-- texts and vectors written under each layout, calls alternating: 599 of 600 embeddings in TOAST
-- before, none after; `unified` 12.05 -> 9.83 ms, `facts_first` 8.19 -> 5.53 ms a call
-- (docs/performance.md, tenth session). Rows written before this migration keep their layout
-- until they are rewritten (`VACUUM FULL`, `pg_repack`).
ALTER TABLE public.facts ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE public.events ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE public.facts SET (toast_tuple_target = 8160);
ALTER TABLE public.events SET (toast_tuple_target = 8160);
