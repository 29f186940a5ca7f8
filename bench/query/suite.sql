-- The query suite's baseline (scripts/bench query; BENCHMARKS.md, "Stats API"): what a
-- first version of the Stats API would send, a straight scan of `events`, exact. The
-- benchmark asks the same questions of the Stats API (bench/query/bench_query.py, SUITE)
-- and times both in the same run.
--
-- Definitions:
--   * every query: one site, `is_bot = 0`, a range of whole days (or hours) in the site's
--     time zone ${TZ}, as [from, to) in UTC;
--   * event metrics count events by their own time: visitors = distinct `user_id`,
--     pageviews = distinct `event_id` of pageviews, events = distinct `event_id`
--     (duplicates collapse on `event_id`, as `uniqExact(event_id)` counts them);
--   * visit metrics count sessions by their start (their first event), with figures from
--     all of their events, late ones included: a session's events are those within a day
--     either side of the range (sessions are cut at 30 minutes of inactivity, and an
--     anonymous one at UTC midnight); visits = sessions, bounces = sessions of one event,
--     a pageview; duration = last event - first event (a sum, in seconds);
--     session_pageviews = the sessions' pageviews (views per visit = session_pageviews /
--     visits; bounce rate = bounces / visits; visit duration = duration / visits: the
--     API divides, so that answers compare exactly);
--   * a visit dimension (entry and exit page, source, channel, UTM tags, referrer,
--     country, device, browser, …) is its session's: the entry page is the path of the
--     first pageview, the exit page of the last; source,
--     channel, country, device and browser those of the session's first event; source is
--     `utm_source` when there is one, else the referrer's domain (without www.), else
--     'Direct / None'; "first" and "last" order events by time, then (for events of the same
--     second) by the low 32 bits of cityHash64(toString(event_id)), the hash the cluster
--     shards events by;
--   * an event dimension (page, event name, properties) is the event's own, and a filter
--     in an event query is on the event's own columns;
--   * breakdowns list the top 100 by visitors, ties by the dimension's value.
-- Each query begins with `-- query: NAME`; the placeholders are filled in by
-- bench/query/bench_query.py: DB, SITE, TZ (the site's time zone, Europe/Berlin), and the
-- ranges as local dates, end excluded: Y_FROM..Y_TO (the last 12 months), PY_FROM..PY_TO
-- (the 12 before), M_FROM..M_TO (the last 30 days), PM_FROM..PM_TO (the 30 before),
-- W_FROM..W_TO (the last 7 days).

-- query: overview_12m
-- The 12-month overview and the 12 months before it (visitors, pageviews; visits,
-- bounces, duration and session pageviews by session start).
SELECT *
FROM
(
    SELECT
        uniqExactIf(user_id, cur) AS visitors,
        uniqExactIf(event_id, cur AND type = 'pageview') AS pageviews,
        uniqExactIf(user_id, NOT cur) AS prev_visitors,
        uniqExactIf(event_id, NOT cur AND type = 'pageview') AS prev_pageviews
    FROM
    (
        SELECT user_id, event_id, type, timestamp >= toDateTime('${Y_FROM} 00:00:00', '${TZ}') AS cur
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${PY_FROM} 00:00:00', '${TZ}')
            AND timestamp < toDateTime('${Y_TO} 00:00:00', '${TZ}')
    )
)
CROSS JOIN
(
    SELECT
        countIf(cur) AS visits,
        countIf(cur AND ev = 1 AND pv = 1) AS bounces,
        toUInt64(sumIf(end - start, cur)) AS duration,
        sumIf(pv, cur) AS session_pageviews,
        countIf(NOT cur) AS prev_visits,
        countIf(NOT cur AND ev = 1 AND pv = 1) AS prev_bounces,
        toUInt64(sumIf(end - start, NOT cur)) AS prev_duration,
        sumIf(pv, NOT cur) AS prev_session_pageviews
    FROM
    (
        SELECT
            session_id,
            min(timestamp) AS start,
            max(timestamp) AS end,
            uniqExact(event_id) AS ev,
            uniqExactIf(event_id, type = 'pageview') AS pv,
            start >= toDateTime('${Y_FROM} 00:00:00', '${TZ}') AS cur
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${PY_FROM} 00:00:00', '${TZ}') - 86400
            AND timestamp < toDateTime('${Y_TO} 00:00:00', '${TZ}') + 86400
        GROUP BY session_id
        HAVING start >= toDateTime('${PY_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${Y_TO} 00:00:00', '${TZ}')
    )
);

-- query: overview_30d
-- The 30-day overview and the 30 days before it.
SELECT *
FROM
(
    SELECT
        uniqExactIf(user_id, cur) AS visitors,
        uniqExactIf(event_id, cur AND type = 'pageview') AS pageviews,
        uniqExactIf(user_id, NOT cur) AS prev_visitors,
        uniqExactIf(event_id, NOT cur AND type = 'pageview') AS prev_pageviews
    FROM
    (
        SELECT user_id, event_id, type, timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AS cur
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${PM_FROM} 00:00:00', '${TZ}')
            AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}')
    )
)
CROSS JOIN
(
    SELECT
        countIf(cur) AS visits,
        countIf(cur AND ev = 1 AND pv = 1) AS bounces,
        toUInt64(sumIf(end - start, cur)) AS duration,
        sumIf(pv, cur) AS session_pageviews,
        countIf(NOT cur) AS prev_visits,
        countIf(NOT cur AND ev = 1 AND pv = 1) AS prev_bounces,
        toUInt64(sumIf(end - start, NOT cur)) AS prev_duration,
        sumIf(pv, NOT cur) AS prev_session_pageviews
    FROM
    (
        SELECT
            session_id,
            min(timestamp) AS start,
            max(timestamp) AS end,
            uniqExact(event_id) AS ev,
            uniqExactIf(event_id, type = 'pageview') AS pv,
            start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AS cur
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${PM_FROM} 00:00:00', '${TZ}') - 86400
            AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
        GROUP BY session_id
        HAVING start >= toDateTime('${PM_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
    )
);

-- query: timeseries_12m
-- The last 12 months by day (the site's days): visitors, pageviews, and the visit metrics
-- of the sessions that started that day.
SELECT
    day,
    sum(visitors) AS visitors,
    sum(pageviews) AS pageviews,
    sum(visits) AS visits,
    sum(bounces) AS bounces,
    sum(duration) AS duration,
    sum(session_pageviews) AS session_pageviews
FROM
(
    SELECT
        toDate(timestamp, '${TZ}') AS day,
        uniqExact(user_id) AS visitors,
        uniqExactIf(event_id, type = 'pageview') AS pageviews,
        toUInt64(0) AS visits, toUInt64(0) AS bounces, toUInt64(0) AS duration, toUInt64(0) AS session_pageviews
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${Y_FROM} 00:00:00', '${TZ}')
        AND timestamp < toDateTime('${Y_TO} 00:00:00', '${TZ}')
    GROUP BY day
    UNION ALL
    SELECT
        toDate(start, '${TZ}') AS day,
        toUInt64(0) AS visitors, toUInt64(0) AS pageviews,
        count() AS visits,
        countIf(ev = 1 AND pv = 1) AS bounces,
        toUInt64(sum(end - start)) AS duration,
        sum(pv) AS session_pageviews
    FROM
    (
        SELECT
            session_id,
            min(timestamp) AS start,
            max(timestamp) AS end,
            uniqExact(event_id) AS ev,
            uniqExactIf(event_id, type = 'pageview') AS pv
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${Y_FROM} 00:00:00', '${TZ}') - 86400
            AND timestamp < toDateTime('${Y_TO} 00:00:00', '${TZ}') + 86400
        GROUP BY session_id
        HAVING start >= toDateTime('${Y_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${Y_TO} 00:00:00', '${TZ}')
    )
    GROUP BY day
)
GROUP BY day
ORDER BY day;

-- query: hourly_7d
-- The last 7 days by hour (the site's hours).
SELECT
    hour,
    sum(visitors) AS visitors,
    sum(pageviews) AS pageviews,
    sum(visits) AS visits,
    sum(bounces) AS bounces,
    sum(duration) AS duration
FROM
(
    SELECT
        toStartOfHour(timestamp, '${TZ}') AS hour,
        uniqExact(user_id) AS visitors,
        uniqExactIf(event_id, type = 'pageview') AS pageviews,
        toUInt64(0) AS visits, toUInt64(0) AS bounces, toUInt64(0) AS duration
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${W_FROM} 00:00:00', '${TZ}')
        AND timestamp < toDateTime('${W_TO} 00:00:00', '${TZ}')
    GROUP BY hour
    UNION ALL
    SELECT
        toStartOfHour(start, '${TZ}') AS hour,
        toUInt64(0) AS visitors, toUInt64(0) AS pageviews,
        count() AS visits,
        countIf(ev = 1 AND pv = 1) AS bounces,
        toUInt64(sum(end - start)) AS duration
    FROM
    (
        SELECT
            session_id,
            min(timestamp) AS start,
            max(timestamp) AS end,
            uniqExact(event_id) AS ev,
            uniqExactIf(event_id, type = 'pageview') AS pv
        FROM ${DB}.events
        WHERE site_id = ${SITE} AND is_bot = 0
            AND timestamp >= toDateTime('${W_FROM} 00:00:00', '${TZ}') - 86400
            AND timestamp < toDateTime('${W_TO} 00:00:00', '${TZ}') + 86400
        GROUP BY session_id
        HAVING start >= toDateTime('${W_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${W_TO} 00:00:00', '${TZ}')
    )
    GROUP BY hour
)
GROUP BY hour
ORDER BY hour;

-- query: pages_30d
-- Top pages over 30 days (an event dimension).
SELECT pathname AS page, uniqExact(user_id) AS visitors, uniqExact(event_id) AS pageviews
FROM ${DB}.events
WHERE site_id = ${SITE} AND is_bot = 0 AND type = 'pageview'
    AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}')
    AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}')
GROUP BY page
ORDER BY visitors DESC, page
LIMIT 100;

-- query: pages_30d_filtered
-- The same, of Chrome users in Germany (filters on the events' own columns).
SELECT pathname AS page, uniqExact(user_id) AS visitors, uniqExact(event_id) AS pageviews
FROM ${DB}.events
WHERE site_id = ${SITE} AND is_bot = 0 AND type = 'pageview'
    AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}')
    AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}')
    AND country = 'DE' AND browser = 'Chrome'
GROUP BY page
ORDER BY visitors DESC, page
LIMIT 100;

-- query: entry_pages_30d
-- Entry pages of the sessions that started in the last 30 days (a visit dimension).
SELECT entry_page, uniqExact(user_id) AS visitors, count() AS visits,
    countIf(ev = 1 AND pv = 1) AS bounces, toUInt64(sum(end - start)) AS duration
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        max(timestamp) AS end,
        uniqExact(event_id) AS ev,
        uniqExactIf(event_id, type = 'pageview') AS pv,
        argMinIf(pathname, (timestamp, cityHash64(toString(event_id)) % 4294967296), type = 'pageview') AS entry_page
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
)
GROUP BY entry_page
ORDER BY visitors DESC, entry_page
LIMIT 100;

-- query: entry_pages_30d_filtered
-- The same, of sessions whose first event was in Germany, with Chrome.
SELECT entry_page, uniqExact(user_id) AS visitors, count() AS visits,
    countIf(ev = 1 AND pv = 1) AS bounces, toUInt64(sum(end - start)) AS duration
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        max(timestamp) AS end,
        uniqExact(event_id) AS ev,
        uniqExactIf(event_id, type = 'pageview') AS pv,
        argMinIf(pathname, (timestamp, cityHash64(toString(event_id)) % 4294967296), type = 'pageview') AS entry_page,
        argMin(country, (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS session_country,
        argMin(browser, (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS session_browser
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
        AND session_country = 'DE' AND session_browser = 'Chrome'
)
GROUP BY entry_page
ORDER BY visitors DESC, entry_page
LIMIT 100;

-- query: sources_30d
-- Sources of the sessions that started in the last 30 days.
SELECT source, uniqExact(user_id) AS visitors, count() AS visits,
    countIf(ev = 1 AND pv = 1) AS bounces, toUInt64(sum(end - start)) AS duration
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        max(timestamp) AS end,
        uniqExact(event_id) AS ev,
        uniqExactIf(event_id, type = 'pageview') AS pv,
        argMin((querystring, referrer), (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS first_qs_ref,
        extractURLParameter(first_qs_ref.1, 'utm_source') AS utm_source,
        domainWithoutWWW(first_qs_ref.2) AS ref_domain,
        multiIf(utm_source != '', utm_source, ref_domain != '', ref_domain, 'Direct / None') AS source
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
)
GROUP BY source
ORDER BY visitors DESC, source
LIMIT 100;

-- query: sources_30d_filtered
SELECT source, uniqExact(user_id) AS visitors, count() AS visits,
    countIf(ev = 1 AND pv = 1) AS bounces, toUInt64(sum(end - start)) AS duration
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        max(timestamp) AS end,
        uniqExact(event_id) AS ev,
        uniqExactIf(event_id, type = 'pageview') AS pv,
        argMin((querystring, referrer, country, browser), (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS first,
        extractURLParameter(first.1, 'utm_source') AS utm_source,
        domainWithoutWWW(first.2) AS ref_domain,
        multiIf(utm_source != '', utm_source, ref_domain != '', ref_domain, 'Direct / None') AS source
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
        AND first.3 = 'DE' AND first.4 = 'Chrome'
)
GROUP BY source
ORDER BY visitors DESC, source
LIMIT 100;

-- query: countries_30d
-- Countries of the sessions that started in the last 30 days.
SELECT country, uniqExact(user_id) AS visitors, count() AS visits
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        argMin(country, (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS country
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
)
GROUP BY country
ORDER BY visitors DESC, country
LIMIT 100;

-- query: countries_30d_filtered
SELECT first.1 AS country, uniqExact(user_id) AS visitors, count() AS visits
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        argMin((country, browser), (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS first
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
        AND first.1 = 'DE' AND first.2 = 'Chrome'
)
GROUP BY country
ORDER BY visitors DESC, country
LIMIT 100;

-- query: devices_30d
-- Device types of the sessions that started in the last 30 days.
SELECT device, uniqExact(user_id) AS visitors, count() AS visits
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        argMin(device_type, (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS device
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
)
GROUP BY device
ORDER BY visitors DESC, device
LIMIT 100;

-- query: devices_30d_filtered
SELECT first.1 AS device, uniqExact(user_id) AS visitors, count() AS visits
FROM
(
    SELECT
        session_id,
        any(user_id) AS user_id,
        min(timestamp) AS start,
        argMin((device_type, country, browser), (timestamp, cityHash64(toString(event_id)) % 4294967296)) AS first
    FROM ${DB}.events
    WHERE site_id = ${SITE} AND is_bot = 0
        AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}') - 86400
        AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}') + 86400
    GROUP BY session_id
    HAVING start >= toDateTime('${M_FROM} 00:00:00', '${TZ}') AND start < toDateTime('${M_TO} 00:00:00', '${TZ}')
        AND first.2 = 'DE' AND first.3 = 'Chrome'
)
GROUP BY device
ORDER BY visitors DESC, device
LIMIT 100;

-- query: props_30d
-- A custom event's property: signups over 30 days by plan (visitors, events).
SELECT visitParamExtractString(properties, 'plan') AS plan, uniqExact(user_id) AS visitors, uniqExact(event_id) AS events
FROM ${DB}.events
WHERE site_id = ${SITE} AND is_bot = 0 AND type = 'custom_event' AND event_name = 'signup'
    AND timestamp >= toDateTime('${M_FROM} 00:00:00', '${TZ}')
    AND timestamp < toDateTime('${M_TO} 00:00:00', '${TZ}')
GROUP BY plan
ORDER BY visitors DESC, plan
LIMIT 100;
