-- The query benchmark's site (scripts/bench query; BENCHMARKS.md, "Stats API"):
-- one site's year of events, written straight into `events` by ClickHouse itself,
-- deterministic for a seed. The placeholders (a dollar sign and a name in braces) are filled
-- in by bench/query/bench_query.py:
--   DB, SITE, SEED, SESSIONS (how many sessions are drawn before thinning), T0 (the first
--   second, UTC), SPAN (seconds: 365 days), PAGES (the pages' Zipf range), RETURNING (the
--   pool of returning people), FIRST, COUNT (the slice of sessions this statement writes:
--   the generator runs in slices, each in time order, so that a block lands in one or two
--   monthly partitions), SAMPLE (a condition on the session number `s`: 1 to write all,
--   `s % 100 = 0` when the driver measures how many events a drawn session makes).
--
-- The model, each draw a hash of (seed, session or person, draw number) taken as a
-- uniform number in [0, 1):
--   * sessions are spread over the year in time order, thinned by a growth trend (0.7 →
--     1.0), weekends (0.7) and the hour of the day (a curve with its low at 03:00 UTC);
--   * 35 % of sessions are by returning people (a pool of RETURNING), the rest by people
--     seen once; a quarter of the returning people are identified users: `user_id`
--     'user-N', stable across days, with a device `anonymous_id`; everyone else has the
--     enricher's kind of visitor id, 32 hex characters that change every UTC day
--     (md5(seed, person, day)), so a returning anonymous visitor has a new id each day
--     and may have several sessions in one day; those are `daily_visitor = 1`;
--   * an anonymous visitor's session never crosses UTC midnight (the id changes there,
--     and so would the session); an identified user's may;
--   * a session has 1-20 events (48 % one), 10 s to 10 min apart (5 % in the same second
--     as the one before: a tie for "first" and "last"); the first is a pageview
--     carrying the session's referrer, channel and UTM tags; later ones are
--     pageviews (85 %, referrer the site, channel Internal), custom events (12 %: signup,
--     add_to_cart, download, play_video, search, each with flat JSON properties) or
--     outbound clicks (3 %);
--   * pages are Zipf-distributed over PAGES paths ('/', '/pricing', … '/blog/post-N',
--     '/docs/page-N'), on three hostnames;
--   * a person has one country (35, weighted, the US a quarter), region, city (a capital or one
--     of a region's 40, Zipf), language, device type, operating system and version,
--     browser and version, and screen size, consistent with each other;
--   * 2 % of sessions are bots (is_bot = 1, device Bot), 0.2 % of events are stored twice
--     (the same event_id, timestamp and every column: a redelivery), and 1 % of events
--     arrive late (received_at up to 3 days after timestamp).
INSERT INTO ${DB}.events (event_id, site_id, timestamp, received_at, type, event_name, properties,
    hostname, pathname, querystring, page_title, referrer, channel, user_id, session_id, language,
    screen_width, screen_height, country, region, city, lat, lon, browser, browser_version,
    operating_system, operating_system_version, device_type, is_bot, ip, anonymous_id, tag,
    app_version, device_model, feature_flags, daily_visitor)
SELECT
    toUUID(concat(substring(eh, 1, 8), '-', substring(eh, 9, 4), '-4', substring(eh, 14, 3), '-a',
        substring(eh, 18, 3), '-', substring(eh, 21, 12))) AS event_id,
    toUInt32(${SITE}) AS site_id,
    toDateTime(start + offsets[i]) AS timestamp,
    toDateTime(start + offsets[i] + if(cityHash64(${SEED}, s, 500 + i) % 100 = 0,
        cityHash64(${SEED}, s, 600 + i) % 259200, 1 + cityHash64(${SEED}, s, 600 + i) % 3)) AS received_at,
    if(i = 1, 'pageview', multiIf(tu < 0.85, 'pageview', tu < 0.97, 'custom_event', 'outbound')) AS type,
    if(type = 'custom_event', multiIf(nu < 0.15, 'signup', nu < 0.45, 'add_to_cart', nu < 0.65, 'download',
        nu < 0.85, 'play_video', 'search'), '') AS event_name,
    multiIf(
        event_name = 'signup', concat('{"plan":"', multiIf(pu < 0.6, 'free', pu < 0.85, 'pro', pu < 0.97, 'team',
            'enterprise'), '","method":"', multiIf(pu2 < 0.5, 'email', pu2 < 0.85, 'google', 'github'), '"}'),
        event_name = 'add_to_cart', concat('{"product":"sku-', toString(toUInt32(pow(200, pu))),
            '","price":"', toString(5 + (cityHash64(${SEED}, s, 700 + i) % 195)), '.99"}'),
        event_name = 'download', concat('{"file":"', arrayElement(['whitepaper.pdf', 'pricing.pdf',
            'datasheet.pdf', 'installer.dmg', 'installer.exe', 'sdk.zip'], 1 + toUInt32(pu * 6)), '"}'),
        event_name = 'play_video', concat('{"video":"', arrayElement(['intro', 'demo', 'webinar',
            'tutorial-1', 'tutorial-2'], 1 + toUInt32(pu * 5)), '","autoplay":"', if(pu2 < 0.3, 'true', 'false'), '"}'),
        event_name = 'search', concat('{"results":"', arrayElement(['0', '1-10', '11-100', '>100'],
            1 + toUInt32(pu * 4)), '"}'),
        type = 'outbound', concat('{"url":"', arrayElement(['https://github.com/example/example',
            'https://twitter.com/example', 'https://www.linkedin.com/company/example', 'https://docs.partner.dev/'],
            1 + toUInt32(pu * 4)), '","text":"link"}'),
        '') AS properties,
    hostname,
    if(page_rank < 12, arrayElement(['/', '/pricing', '/features', '/blog', '/docs', '/about', '/signup',
        '/login', '/contact', '/integrations', '/changelog', '/careers'], 1 + page_rank),
        if(page_rank < 40 + intDiv(${PAGES}, 4), concat('/blog/post-', toString(page_rank)),
            concat('/docs/page-', toString(page_rank)))) AS pathname,
    if(i = 1, session_qs, '') AS querystring,
    concat('Example — ', pathname) AS page_title,
    if(i = 1, session_referrer, concat('https://', hostname, '/')) AS referrer,
    if(i = 1, session_channel, 'Internal') AS channel,
    user_id,
    session_id,
    language,
    screen_width,
    screen_height,
    country,
    region,
    city,
    lat,
    lon,
    browser,
    browser_version,
    operating_system,
    operating_system_version,
    device_type,
    is_bot,
    '' AS ip,
    anonymous_id,
    '' AS tag,
    '' AS app_version,
    '' AS device_model,
    '' AS feature_flags,
    -- As the enricher marks its visitor ids (anyone but an identified user here).
    toUInt8(user_id NOT LIKE 'user-%') AS daily_visitor
FROM
(
    SELECT
        s,
        start,
        offsets,
        hostname,
        entry_rank,
        session_qs,
        session_referrer,
        session_channel,
        user_id,
        session_id,
        language,
        screen_width,
        screen_height,
        country,
        region,
        city,
        lat,
        lon,
        browser,
        browser_version,
        operating_system,
        operating_system_version,
        device_type,
        is_bot,
        anonymous_id,
        i,
        -- Per event (a duplicate has its original's index, and so the same values).
        hex(MD5(concat(toString(${SEED}), '/event/', toString(s), '/', toString(i)))) AS eh,
        cityHash64(${SEED}, s, 400 + i) / 18446744073709551616. AS tu,
        cityHash64(${SEED}, s, 450 + i) / 18446744073709551616. AS nu,
        cityHash64(${SEED}, s, 800 + i) / 18446744073709551616. AS pu,
        cityHash64(${SEED}, s, 850 + i) / 18446744073709551616. AS pu2,
        if(i = 1, entry_rank, toUInt32(pow(${PAGES} + 1, cityHash64(${SEED}, s, 900 + i) / 18446744073709551616.)) - 1) AS page_rank
    FROM
    (
        SELECT
            s,
            start,
            offsets,
            hostname,
            entry_rank,
            session_qs,
            session_referrer,
            session_channel,
            user_id,
            session_id,
            language,
            screen_width,
            screen_height,
            country,
            region,
            city,
            lat,
            lon,
            browser,
            browser_version,
            operating_system,
            operating_system_version,
            device_type,
            is_bot,
            anonymous_id,
            -- The events, in order, each index once, and a duplicate of 0.2 % of them.
            arrayConcat(arrayEnumerate(offsets),
                arrayFilter(k -> cityHash64(${SEED}, s, 300 + k) % 500 = 0, arrayEnumerate(offsets))) AS idx
        FROM
        (
            SELECT
                number + ${FIRST} AS s,
                cityHash64(${SEED}, s, 0) / 18446744073709551616. AS u0,
                toUInt32(greatest(${T0}, ${T0} + intDiv(s * ${SPAN}, ${SESSIONS}) - cityHash64(${SEED}, s, 1) % 240)) AS t_raw,
                -- Thinning: growth over the year, weekends, the hour of the day (UTC).
                (0.7 + 0.3 * (t_raw - ${T0}) / ${SPAN})
                  * if(toDayOfWeek(toDateTime(t_raw)) >= 6, 0.7, 1.)
                  * arrayElement([0.30, 0.25, 0.22, 0.20, 0.22, 0.30, 0.45, 0.62, 0.78, 0.90, 0.96, 1.0,
                                  0.98, 0.96, 0.95, 0.94, 0.92, 0.90, 0.88, 0.82, 0.72, 0.60, 0.48, 0.38],
                                 1 + intDiv(t_raw % 86400, 3600)) AS w,
                cityHash64(${SEED}, s, 4) % 50 = 0 AS bot,
                cityHash64(${SEED}, s, 2) % 100 < 35 AND NOT bot AS returning,
                if(returning, 1000000000000 + cityHash64(${SEED}, s, 3) % ${RETURNING}, s) AS p,
                returning AND cityHash64(${SEED}, p, 1000) % 4 = 0 AS identified,
                -- 1-20 events (a bot's 1-3), 10 s to 10 min apart, or (5 %) in the same second.
                if(bot, 1 + cityHash64(${SEED}, s, 5) % 3,
                   1 + toUInt32(19 * pow(cityHash64(${SEED}, s, 5) / 18446744073709551616., 4))) AS n_events,
                arrayCumSum(arrayMap(k -> if(k = 1 OR cityHash64(${SEED}, s, 150 + k) % 20 = 0, 0,
                    10 + toUInt32(600 * pow(cityHash64(${SEED}, s, 100 + k) / 18446744073709551616., 2))),
                    arrayEnumerate(range(n_events)))) AS offsets,
                offsets[n_events] AS span,
                -- An anonymous visitor's session ends before UTC midnight.
                if(identified, t_raw, least(t_raw, intDiv(t_raw, 86400) * 86400 + 86399 - span)) AS start,
                intDiv(start, 86400) AS day,
                -- The person: device, system, browser, place, language.
                cityHash64(${SEED}, p, 1001) / 18446744073709551616. AS pd,
                cityHash64(${SEED}, p, 1002) / 18446744073709551616. AS po,
                cityHash64(${SEED}, p, 1003) / 18446744073709551616. AS pb,
                cityHash64(${SEED}, p, 1004) / 18446744073709551616. AS pv,
                cityHash64(${SEED}, p, 1005) / 18446744073709551616. AS pc,
                cityHash64(${SEED}, p, 1006) / 18446744073709551616. AS pr,
                cityHash64(${SEED}, p, 1007) / 18446744073709551616. AS pcity,
                cityHash64(${SEED}, p, 1008) / 18446744073709551616. AS pscreen,
                if(bot, 'Bot', multiIf(pd < 0.55, 'Desktop', pd < 0.96, 'Mobile', 'Tablet')) AS device_type,
                multiIf(bot, '',
                    device_type = 'Desktop', arrayElement(['Windows', 'Mac OS X', 'Linux', 'Chrome OS'],
                        arrayFirstIndex(c -> c > po, [0.62, 0.90, 0.96, 1.01])),
                    device_type = 'Mobile', if(po < 0.55, 'Android', 'iOS'),
                    if(po < 0.6, 'iOS', 'Android')) AS operating_system,
                multiIf(operating_system = 'Windows', if(pv < 0.55, '10', '11'),
                    operating_system = 'Mac OS X', arrayElement(['10.15', '14', '15'], arrayFirstIndex(c -> c > pv, [0.5, 0.75, 1.01])),
                    operating_system = 'Android', arrayElement(['13', '14', '15'], arrayFirstIndex(c -> c > pv, [0.3, 0.7, 1.01])),
                    operating_system = 'iOS', arrayElement(['17.6', '18.1', '18.2'], arrayFirstIndex(c -> c > pv, [0.25, 0.6, 1.01])),
                    '') AS operating_system_version,
                multiIf(bot, if(pb < 0.7, 'Googlebot', 'bingbot'),
                    operating_system = 'Windows', arrayElement(['Chrome', 'Edge', 'Firefox', 'Opera'],
                        arrayFirstIndex(c -> c > pb, [0.68, 0.88, 0.98, 1.01])),
                    operating_system = 'Mac OS X', arrayElement(['Chrome', 'Safari', 'Firefox', 'Edge'],
                        arrayFirstIndex(c -> c > pb, [0.45, 0.90, 0.98, 1.01])),
                    operating_system = 'Linux', if(pb < 0.6, 'Chrome', 'Firefox'),
                    operating_system = 'Chrome OS', 'Chrome',
                    operating_system = 'Android', arrayElement(['Chrome Mobile', 'Samsung Internet', 'Firefox Mobile', 'Opera Mobile'],
                        arrayFirstIndex(c -> c > pb, [0.75, 0.93, 0.97, 1.01])),
                    arrayElement(['Mobile Safari', 'Chrome Mobile iOS', 'Firefox iOS'],
                        arrayFirstIndex(c -> c > pb, [0.82, 0.97, 1.01]))) AS browser,
                multiIf(browser IN ('Chrome', 'Edge', 'Chrome Mobile', 'Chrome Mobile iOS', 'Opera', 'Opera Mobile'),
                        toString(131 - toUInt32(14 * pow(pv, 3))),
                    browser IN ('Safari', 'Mobile Safari'), arrayElement(['16', '17', '18'], arrayFirstIndex(c -> c > pv, [0.1, 0.35, 1.01])),
                    browser IN ('Firefox', 'Firefox Mobile', 'Firefox iOS'), toString(133 - toUInt32(18 * pow(pv, 3))),
                    browser = 'Samsung Internet', toString(26 - toUInt32(4 * pv)),
                    toString(2 + toUInt32(pv * 1.5))) AS browser_version,
                multiIf(device_type = 'Desktop', arrayElement([(1920, 1080), (1536, 864), (1440, 900), (2560, 1440), (1366, 768)],
                            arrayFirstIndex(c -> c > pscreen, [0.4, 0.6, 0.75, 0.9, 1.01])),
                        device_type = 'Mobile', arrayElement([(390, 844), (414, 896), (360, 800), (393, 873), (412, 915)],
                            arrayFirstIndex(c -> c > pscreen, [0.3, 0.45, 0.7, 0.85, 1.01])),
                        device_type = 'Tablet', arrayElement([(768, 1024), (810, 1080), (820, 1180)],
                            arrayFirstIndex(c -> c > pscreen, [0.4, 0.7, 1.01])),
                        (toUInt16(0), toUInt16(0))) AS screen,
                toUInt16(screen.1) AS screen_width,
                toUInt16(screen.2) AS screen_height,
                arrayFirstIndex(c -> c > pc, [0.25, 0.37, 0.45, 0.51, 0.58, 0.62, 0.65, 0.69, 0.72, 0.75, 0.78, 0.80,
                    0.82, 0.84, 0.855, 0.87, 0.885, 0.90, 0.91, 0.92, 0.93, 0.94, 0.948, 0.956, 0.963, 0.97, 0.975,
                    0.98, 0.984, 0.988, 0.991, 0.994, 0.996, 0.998, 1.01]) AS ci,
                arrayElement(['US', 'DE', 'GB', 'FR', 'IN', 'CA', 'NL', 'BR', 'JP', 'ES', 'IT', 'PL', 'AU', 'SE', 'CH',
                    'AT', 'MX', 'BE', 'DK', 'NO', 'FI', 'IE', 'PT', 'CZ', 'TR', 'KR', 'SG', 'IL', 'AR', 'ZA', 'NZ',
                    'UA', 'RO', 'ID', 'NG'], ci) AS country,
                arrayElement(['en-US', 'de-DE', 'en-GB', 'fr-FR', 'en-IN', 'en-CA', 'nl-NL', 'pt-BR', 'ja-JP', 'es-ES',
                    'it-IT', 'pl-PL', 'en-AU', 'sv-SE', 'de-CH', 'de-AT', 'es-MX', 'nl-BE', 'da-DK', 'nb-NO', 'fi-FI',
                    'en-IE', 'pt-PT', 'cs-CZ', 'tr-TR', 'ko-KR', 'en-SG', 'he-IL', 'es-AR', 'en-ZA', 'en-NZ', 'uk-UA',
                    'ro-RO', 'id-ID', 'en-NG'], ci) AS language,
                -- Eight regions a country (Zipf), 40 cities a region (Zipf), a third in the capital.
                toUInt32(pow(9, pr)) AS ri,
                concat(country, '-', arrayElement(['A', 'B', 'C', 'D', 'E', 'F', 'G', 'H'], ri)) AS region,
                if(pcity < 0.33, arrayElement(['Washington', 'Berlin', 'London', 'Paris', 'New Delhi', 'Ottawa',
                        'Amsterdam', 'Brasilia', 'Tokyo', 'Madrid', 'Rome', 'Warsaw', 'Canberra', 'Stockholm', 'Bern',
                        'Vienna', 'Mexico City', 'Brussels', 'Copenhagen', 'Oslo', 'Helsinki', 'Dublin', 'Lisbon',
                        'Prague', 'Ankara', 'Seoul', 'Singapore', 'Jerusalem', 'Buenos Aires', 'Pretoria',
                        'Wellington', 'Kyiv', 'Bucharest', 'Jakarta', 'Abuja'], ci),
                    concat(region, ' city ', toString(toUInt32(pow(41, (pcity - 0.33) / 0.67))))) AS city,
                round(-50 + 110 * (cityHash64(city) % 10000) / 10000., 4) AS lat,
                round(-170 + 340 * (cityHash64(city, 1) % 10000) / 10000., 4) AS lon,
                -- The visitor: the enricher's kind of id for everyone but identified users.
                if(identified, concat('user-', toString(p - 1000000000000)),
                   lower(hex(MD5(concat(toString(${SEED}), '/', toString(p), '/', toString(day)))))) AS user_id,
                if(identified, lower(hex(MD5(concat('device/', toString(${SEED}), '/', toString(p))))), '') AS anonymous_id,
                lower(hex(MD5(concat(toString(${SEED}), '/session/', toString(s))))) AS session_id,
                toUInt8(bot) AS is_bot,
                -- Where the session came from.
                cityHash64(${SEED}, s, 20) / 18446744073709551616. AS cu,
                cityHash64(${SEED}, s, 21) / 18446744073709551616. AS cu2,
                arrayElement(['spring_sale', 'black_friday', 'brand', 'retargeting', 'launch_v2'], 1 + toUInt32(cu2 * 5)) AS campaign,
                multiIf(cu < 0.35, 'Direct', cu < 0.65, 'Organic Search', cu < 0.75, 'Referral', cu < 0.85, 'Organic Social',
                    cu < 0.92, 'Paid Search', cu < 0.96, 'Email', 'Paid Social') AS session_channel,
                toUInt32(pow(401, cu2)) - 1 AS ref_rank,
                multiIf(session_channel = 'Organic Search', arrayElement(['https://www.google.com/', 'https://www.bing.com/',
                        'https://duckduckgo.com/', 'https://www.ecosia.org/'], arrayFirstIndex(c -> c > cu2, [0.85, 0.93, 0.98, 1.01])),
                    session_channel = 'Referral', if(ref_rank < 6, arrayElement(['https://news.ycombinator.com/', 'https://github.com/',
                        'https://stackoverflow.com/', 'https://dev.to/', 'https://www.producthunt.com/', 'https://medium.com/'], 1 + ref_rank),
                        concat('https://blog', toString(ref_rank), '.example.org/post/', toString(cityHash64(${SEED}, s, 22) % 50))),
                    session_channel = 'Organic Social', arrayElement(['https://t.co/', 'https://www.facebook.com/',
                        'https://www.linkedin.com/', 'https://www.reddit.com/', 'https://www.youtube.com/'],
                        arrayFirstIndex(c -> c > cu2, [0.3, 0.55, 0.75, 0.92, 1.01])),
                    session_channel = 'Paid Search', 'https://www.google.com/',
                    session_channel = 'Paid Social', 'https://www.facebook.com/',
                    '') AS session_referrer,
                multiIf(session_channel = 'Paid Search', concat('?utm_source=google&utm_medium=cpc&utm_campaign=', campaign,
                        '&utm_term=', arrayElement(['analytics', 'web+analytics', 'privacy+analytics', 'open+source+analytics'],
                        1 + cityHash64(${SEED}, s, 23) % 4), '&gclid=', lower(hex(cityHash64(${SEED}, s, 24)))),
                    session_channel = 'Email', concat('?utm_source=newsletter&utm_medium=email&utm_campaign=newsletter-',
                        toString(toYYYYMM(toDateTime(start)))),
                    session_channel = 'Paid Social', concat('?utm_source=facebook&utm_medium=paid_social&utm_campaign=', campaign,
                        '&utm_content=', arrayElement(['video', 'carousel', 'image'], 1 + cityHash64(${SEED}, s, 25) % 3)),
                    session_channel = 'Organic Social' AND cu2 < 0.1, '?utm_source=twitter&utm_medium=social',
                    '') AS session_qs,
                multiIf(cityHash64(${SEED}, s, 26) % 100 < 90, 'example.com',
                    cityHash64(${SEED}, s, 26) % 100 < 98, 'docs.example.com', 'shop.example.com') AS hostname,
                toUInt32(pow(${PAGES} + 1, cityHash64(${SEED}, s, 27) / 18446744073709551616.)) - 1 AS entry_rank
            FROM numbers(${COUNT})
            WHERE u0 < w AND ${SAMPLE}
        )
    )
    ARRAY JOIN idx AS i
)
