"""Every example of RFC 5545 §3.8.5.3 ("Recurrence Rule"), America/New_York.

Source: RFC 5545 (September 2009), §3.8.5.3, pages 123-132 ("All examples assume the
Eastern United States time zone"). Each expected list is transcribed from the RFC's own
"==>" lines: the listed local date, the DTSTART's time of day (9:00 AM unless the RFC
lists times), and the RFC's own EDT/EST annotation, turned into UTC by hand (EDT is
UTC-04:00, EST is UTC-05:00, RFC 5545 §3.3.5 / §3.3.14 examples). Nothing here is taken
from running the engine. Where the RFC abbreviates with "..." or "1-31", the list is
written out with `range`, reading the RFC's pattern; unbounded ("forever") examples are
compared on the prefix the RFC lists.

Where the RFC and the engine's documented choices differ, the test follows
`reminder_core.domain.recurrence` and says so:
- An unsynchronized DTSTART is not an occurrence (module docstring, rule 4): the only
  such example ("Every Friday the 13th") excludes it with EXDATE, so the listed result
  is the same either way.
- "Every 3 hours from 9:00 AM to 5:00 PM on a specific day" lists 15:00 EDT although its
  own UNTIL (17:00Z = 13:00 EDT) excludes it; see that test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

import pytest

from reminder_core.domain.recurrence import (
    DEFAULT_LIMITS,
    Limits,
    compile_schedule,
    iter_occurrences,
    next_occurrence,
)

NY = ZoneInfo("America/New_York")
# RFC 5545 §3.3.14: "-0500" is standard time for New York; daylight time is one hour less.
OFFSET_HOURS = {"EDT": -4, "EST": -5}
FAST = Limits(min_spacing_s=0)  # the sub-hourly examples (MINUTELY) need it


# One expected occurrence: (UTC instant, local wall-clock time as the RFC lists it).
Expected = tuple[datetime, datetime]


def at(
    label: str, year: int, month: int, days: Iterable[int], hour: int = 9, minute: int = 0
) -> list[Expected]:
    """`hour:minute` local on `days` of `month`, read with the RFC's EDT/EST annotation
    `label` (local = UTC + offset, so UTC = local - offset)."""
    offset = timedelta(hours=OFFSET_HOURS[label])
    out: list[Expected] = []
    for d in days:
        local = datetime(year, month, d, hour, minute)
        out.append(((local - offset).replace(tzinfo=UTC), local))
    return out


def times(label: str, year: int, month: int, day: int, hhmm: Iterable[str]) -> list[Expected]:
    """The listed local times ("09:00", "10:30") on one day."""
    out: list[Expected] = []
    for text in hhmm:
        h, m = (int(p) for p in text.split(":"))
        out += at(label, year, month, [day], h, m)
    return out


def r(first: int, last: int, step: int = 1) -> range:
    """Days first..last inclusive (the RFC's "2-30", "2,4,6...24")."""
    return range(first, last + 1, step)


@dataclass(frozen=True)
class Example:
    title: str  # the RFC's own caption, used as the test id
    dtstart: datetime  # DTSTART;TZID=America/New_York (naive local)
    rrule: str
    expected: list[Expected]
    forever: bool = False  # unbounded: compare the listed prefix
    exdates: tuple[datetime, ...] = ()
    limits: Limits = DEFAULT_LIMITS


def d9(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, 9, 0)


EVERY_DAY_IN_JANUARY = (
    at("EST", 1998, 1, r(1, 31)) + at("EST", 1999, 1, r(1, 31)) + at("EST", 2000, 1, r(1, 31))
)
TU_TH_FIVE_WEEKS = at("EDT", 1997, 9, [2, 4, 9, 11, 16, 18, 23, 25, 30]) + at("EDT", 1997, 10, [2])
EVERY_20_MINUTES = [
    t
    for day in (2, 3)
    for t in times("EDT", 1997, 9, day, [f"{h}:{m:02d}" for h in r(9, 16) for m in (0, 20, 40)])
]

EXAMPLES = [
    Example(
        "Daily for 10 occurrences",
        d9(1997, 9, 2),
        "FREQ=DAILY;COUNT=10",
        # ==> (1997 9:00 AM EDT) September 2-11
        at("EDT", 1997, 9, r(2, 11)),
    ),
    Example(
        "Daily until December 24, 1997",
        d9(1997, 9, 2),
        "FREQ=DAILY;UNTIL=19971224T000000Z",
        # ==> (1997 9:00 AM EDT) September 2-30;October 1-25
        #     (1997 9:00 AM EST) October 26-31;November 1-30;December 1-23
        at("EDT", 1997, 9, r(2, 30))
        + at("EDT", 1997, 10, r(1, 25))
        + at("EST", 1997, 10, r(26, 31))
        + at("EST", 1997, 11, r(1, 30))
        + at("EST", 1997, 12, r(1, 23)),
    ),
    Example(
        "Every other day - forever",
        d9(1997, 9, 2),
        "FREQ=DAILY;INTERVAL=2",
        # ==> (1997 9:00 AM EDT) September 2,4,6,8...24,26,28,30; October 2,4,6...20,22,24
        #     (1997 9:00 AM EST) October 26,28,30; November 1,3,5,7...25,27,29; December 1,3,...
        at("EDT", 1997, 9, r(2, 30, 2))
        + at("EDT", 1997, 10, r(2, 24, 2))
        + at("EST", 1997, 10, [26, 28, 30])
        + at("EST", 1997, 11, r(1, 29, 2))
        + at("EST", 1997, 12, [1, 3]),
        forever=True,
    ),
    Example(
        "Every 10 days, 5 occurrences",
        d9(1997, 9, 2),
        "FREQ=DAILY;INTERVAL=10;COUNT=5",
        # ==> (1997 9:00 AM EDT) September 2,12,22; October 2,12
        at("EDT", 1997, 9, [2, 12, 22]) + at("EDT", 1997, 10, [2, 12]),
    ),
    Example(
        "Every day in January, for 3 years (YEARLY form)",
        d9(1998, 1, 1),
        "FREQ=YEARLY;UNTIL=20000131T140000Z;BYMONTH=1;BYDAY=SU,MO,TU,WE,TH,FR,SA",
        # ==> (1998 9:00 AM EST)January 1-31 (1999 ...)January 1-31 (2000 ...)January 1-31
        EVERY_DAY_IN_JANUARY,
    ),
    Example(
        "Every day in January, for 3 years (DAILY form)",
        d9(1998, 1, 1),
        "FREQ=DAILY;UNTIL=20000131T140000Z;BYMONTH=1",
        EVERY_DAY_IN_JANUARY,
    ),
    Example(
        "Weekly for 10 occurrences",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;COUNT=10",
        # ==> (1997 9:00 AM EDT) September 2,9,16,23,30;October 7,14,21
        #     (1997 9:00 AM EST) October 28;November 4
        at("EDT", 1997, 9, [2, 9, 16, 23, 30])
        + at("EDT", 1997, 10, [7, 14, 21])
        + at("EST", 1997, 10, [28])
        + at("EST", 1997, 11, [4]),
    ),
    Example(
        "Weekly until December 24, 1997",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;UNTIL=19971224T000000Z",
        # ==> (1997 9:00 AM EDT) September 2,9,16,23,30; October 7,14,21
        #     (1997 9:00 AM EST) October 28; November 4,11,18,25; December 2,9,16,23
        at("EDT", 1997, 9, [2, 9, 16, 23, 30])
        + at("EDT", 1997, 10, [7, 14, 21])
        + at("EST", 1997, 10, [28])
        + at("EST", 1997, 11, [4, 11, 18, 25])
        + at("EST", 1997, 12, [2, 9, 16, 23]),
    ),
    Example(
        "Every other week - forever",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;INTERVAL=2;WKST=SU",
        # ==> (1997 9:00 AM EDT) September 2,16,30; October 14
        #     (1997 9:00 AM EST) October 28; November 11,25; December 9,23
        #     (1998 9:00 AM EST) January 6,20; February 3, 17 ...
        at("EDT", 1997, 9, [2, 16, 30])
        + at("EDT", 1997, 10, [14])
        + at("EST", 1997, 10, [28])
        + at("EST", 1997, 11, [11, 25])
        + at("EST", 1997, 12, [9, 23])
        + at("EST", 1998, 1, [6, 20])
        + at("EST", 1998, 2, [3, 17]),
        forever=True,
    ),
    Example(
        "Weekly on Tuesday and Thursday for five weeks (UNTIL form)",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;UNTIL=19971007T000000Z;WKST=SU;BYDAY=TU,TH",
        # ==> (1997 9:00 AM EDT) September 2,4,9,11,16,18,23,25,30; October 2
        TU_TH_FIVE_WEEKS,
    ),
    Example(
        "Weekly on Tuesday and Thursday for five weeks (COUNT form)",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;COUNT=10;WKST=SU;BYDAY=TU,TH",
        TU_TH_FIVE_WEEKS,
    ),
    Example(
        "Every other week on Monday, Wednesday, and Friday until December 24, 1997, "
        "starting on Monday, September 1, 1997",
        d9(1997, 9, 1),
        "FREQ=WEEKLY;INTERVAL=2;UNTIL=19971224T000000Z;WKST=SU;BYDAY=MO,WE,FR",
        # ==> (1997 9:00 AM EDT) September 1,3,5,15,17,19,29; October 1,3,13,15,17
        #     (1997 9:00 AM EST) October 27,29,31; November 10,12,14,24,26,28;
        #                        December 8,10,12,22
        at("EDT", 1997, 9, [1, 3, 5, 15, 17, 19, 29])
        + at("EDT", 1997, 10, [1, 3, 13, 15, 17])
        + at("EST", 1997, 10, [27, 29, 31])
        + at("EST", 1997, 11, [10, 12, 14, 24, 26, 28])
        + at("EST", 1997, 12, [8, 10, 12, 22]),
    ),
    Example(
        "Every other week on Tuesday and Thursday, for 8 occurrences",
        d9(1997, 9, 2),
        "FREQ=WEEKLY;INTERVAL=2;COUNT=8;WKST=SU;BYDAY=TU,TH",
        # ==> (1997 9:00 AM EDT) September 2,4,16,18,30; October 2,14,16
        at("EDT", 1997, 9, [2, 4, 16, 18, 30]) + at("EDT", 1997, 10, [2, 14, 16]),
    ),
    Example(
        "Monthly on the first Friday for 10 occurrences",
        d9(1997, 9, 5),
        "FREQ=MONTHLY;COUNT=10;BYDAY=1FR",
        # ==> (1997 9:00 AM EDT) September 5;October 3
        #     (1997 9:00 AM EST) November 7;December 5
        #     (1998 9:00 AM EST) January 2;February 6;March 6;April 3
        #     (1998 9:00 AM EDT) May 1;June 5
        at("EDT", 1997, 9, [5])
        + at("EDT", 1997, 10, [3])
        + at("EST", 1997, 11, [7])
        + at("EST", 1997, 12, [5])
        + at("EST", 1998, 1, [2])
        + at("EST", 1998, 2, [6])
        + at("EST", 1998, 3, [6])
        + at("EST", 1998, 4, [3])
        + at("EDT", 1998, 5, [1])
        + at("EDT", 1998, 6, [5]),
    ),
    Example(
        "Monthly on the first Friday until December 24, 1997",
        d9(1997, 9, 5),
        "FREQ=MONTHLY;UNTIL=19971224T000000Z;BYDAY=1FR",
        # ==> (1997 9:00 AM EDT) September 5; October 3
        #     (1997 9:00 AM EST) November 7; December 5
        at("EDT", 1997, 9, [5])
        + at("EDT", 1997, 10, [3])
        + at("EST", 1997, 11, [7])
        + at("EST", 1997, 12, [5]),
    ),
    Example(
        "Every other month on the first and last Sunday of the month for 10 occurrences",
        d9(1997, 9, 7),
        "FREQ=MONTHLY;INTERVAL=2;COUNT=10;BYDAY=1SU,-1SU",
        # ==> (1997 9:00 AM EDT) September 7,28
        #     (1997 9:00 AM EST) November 2,30
        #     (1998 9:00 AM EST) January 4,25;March 1,29
        #     (1998 9:00 AM EDT) May 3,31
        at("EDT", 1997, 9, [7, 28])
        + at("EST", 1997, 11, [2, 30])
        + at("EST", 1998, 1, [4, 25])
        + at("EST", 1998, 3, [1, 29])
        + at("EDT", 1998, 5, [3, 31]),
    ),
    Example(
        "Monthly on the second-to-last Monday of the month for 6 months",
        d9(1997, 9, 22),
        "FREQ=MONTHLY;COUNT=6;BYDAY=-2MO",
        # ==> (1997 9:00 AM EDT) September 22;October 20
        #     (1997 9:00 AM EST) November 17;December 22
        #     (1998 9:00 AM EST) January 19;February 16
        at("EDT", 1997, 9, [22])
        + at("EDT", 1997, 10, [20])
        + at("EST", 1997, 11, [17])
        + at("EST", 1997, 12, [22])
        + at("EST", 1998, 1, [19])
        + at("EST", 1998, 2, [16]),
    ),
    Example(
        "Monthly on the third-to-the-last day of the month, forever",
        d9(1997, 9, 28),
        "FREQ=MONTHLY;BYMONTHDAY=-3",
        # ==> (1997 9:00 AM EDT) September 28
        #     (1997 9:00 AM EST) October 29;November 28;December 29
        #     (1998 9:00 AM EST) January 29;February 26 ...
        at("EDT", 1997, 9, [28])
        + at("EST", 1997, 10, [29])
        + at("EST", 1997, 11, [28])
        + at("EST", 1997, 12, [29])
        + at("EST", 1998, 1, [29])
        + at("EST", 1998, 2, [26]),
        forever=True,
    ),
    Example(
        "Monthly on the 2nd and 15th of the month for 10 occurrences",
        d9(1997, 9, 2),
        "FREQ=MONTHLY;COUNT=10;BYMONTHDAY=2,15",
        # ==> (1997 9:00 AM EDT) September 2,15;October 2,15
        #     (1997 9:00 AM EST) November 2,15;December 2,15
        #     (1998 9:00 AM EST) January 2,15
        at("EDT", 1997, 9, [2, 15])
        + at("EDT", 1997, 10, [2, 15])
        + at("EST", 1997, 11, [2, 15])
        + at("EST", 1997, 12, [2, 15])
        + at("EST", 1998, 1, [2, 15]),
    ),
    Example(
        "Monthly on the first and last day of the month for 10 occurrences",
        d9(1997, 9, 30),
        "FREQ=MONTHLY;COUNT=10;BYMONTHDAY=1,-1",
        # ==> (1997 9:00 AM EDT) September 30;October 1
        #     (1997 9:00 AM EST) October 31;November 1,30;December 1,31
        #     (1998 9:00 AM EST) January 1,31;February 1
        at("EDT", 1997, 9, [30])
        + at("EDT", 1997, 10, [1])
        + at("EST", 1997, 10, [31])
        + at("EST", 1997, 11, [1, 30])
        + at("EST", 1997, 12, [1, 31])
        + at("EST", 1998, 1, [1, 31])
        + at("EST", 1998, 2, [1]),
    ),
    Example(
        "Every 18 months on the 10th thru 15th of the month for 10 occurrences",
        d9(1997, 9, 10),
        "FREQ=MONTHLY;INTERVAL=18;COUNT=10;BYMONTHDAY=10,11,12,13,14,15",
        # ==> (1997 9:00 AM EDT) September 10,11,12,13,14,15
        #     (1999 9:00 AM EST) March 10,11,12,13
        at("EDT", 1997, 9, r(10, 15)) + at("EST", 1999, 3, r(10, 13)),
    ),
    Example(
        "Every Tuesday, every other month",
        d9(1997, 9, 2),
        "FREQ=MONTHLY;INTERVAL=2;BYDAY=TU",
        # ==> (1997 9:00 AM EDT) September 2,9,16,23,30
        #     (1997 9:00 AM EST) November 4,11,18,25
        #     (1998 9:00 AM EST) January 6,13,20,27;March 3,10,17,24,31 ...
        at("EDT", 1997, 9, [2, 9, 16, 23, 30])
        + at("EST", 1997, 11, [4, 11, 18, 25])
        + at("EST", 1998, 1, [6, 13, 20, 27])
        + at("EST", 1998, 3, [3, 10, 17, 24, 31]),
        forever=True,
    ),
    Example(
        "Yearly in June and July for 10 occurrences",
        d9(1997, 6, 10),
        "FREQ=YEARLY;COUNT=10;BYMONTH=6,7",
        # ==> (1997..2001 9:00 AM EDT) June 10;July 10
        [t for y in r(1997, 2001) for t in at("EDT", y, 6, [10]) + at("EDT", y, 7, [10])],
    ),
    Example(
        "Every other year on January, February, and March for 10 occurrences",
        d9(1997, 3, 10),
        "FREQ=YEARLY;INTERVAL=2;COUNT=10;BYMONTH=1,2,3",
        # ==> (1997 9:00 AM EST) March 10
        #     (1999, 2001, 2003 9:00 AM EST) January 10;February 10;March 10
        at("EST", 1997, 3, [10])
        + [t for y in (1999, 2001, 2003) for m in (1, 2, 3) for t in at("EST", y, m, [10])],
    ),
    Example(
        "Every third year on the 1st, 100th, and 200th day for 10 occurrences",
        d9(1997, 1, 1),
        "FREQ=YEARLY;INTERVAL=3;COUNT=10;BYYEARDAY=1,100,200",
        # ==> (1997 9:00 AM EST) January 1   (1997 9:00 AM EDT) April 10;July 19
        #     (2000 9:00 AM EST) January 1   (2000 9:00 AM EDT) April 9;July 18
        #     (2003 9:00 AM EST) January 1   (2003 9:00 AM EDT) April 10;July 19
        #     (2006 9:00 AM EST) January 1
        at("EST", 1997, 1, [1])
        + at("EDT", 1997, 4, [10])
        + at("EDT", 1997, 7, [19])
        + at("EST", 2000, 1, [1])
        + at("EDT", 2000, 4, [9])
        + at("EDT", 2000, 7, [18])
        + at("EST", 2003, 1, [1])
        + at("EDT", 2003, 4, [10])
        + at("EDT", 2003, 7, [19])
        + at("EST", 2006, 1, [1]),
    ),
    Example(
        "Every 20th Monday of the year, forever",
        d9(1997, 5, 19),
        "FREQ=YEARLY;BYDAY=20MO",
        # ==> (1997 9:00 AM EDT) May 19 (1998 ...) May 18 (1999 ...) May 17 ...
        at("EDT", 1997, 5, [19]) + at("EDT", 1998, 5, [18]) + at("EDT", 1999, 5, [17]),
        forever=True,
    ),
    Example(
        "Monday of week number 20 (where the default start of the week is Monday), forever",
        d9(1997, 5, 12),
        "FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO",
        # ==> (1997 9:00 AM EDT) May 12 (1998 ...) May 11 (1999 ...) May 17 ...
        at("EDT", 1997, 5, [12]) + at("EDT", 1998, 5, [11]) + at("EDT", 1999, 5, [17]),
        forever=True,
    ),
    Example(
        "Every Thursday in March, forever",
        d9(1997, 3, 13),
        "FREQ=YEARLY;BYMONTH=3;BYDAY=TH",
        # ==> (1997 9:00 AM EST) March 13,20,27
        #     (1998 9:00 AM EST) March 5,12,19,26
        #     (1999 9:00 AM EST) March 4,11,18,25 ...
        at("EST", 1997, 3, [13, 20, 27])
        + at("EST", 1998, 3, [5, 12, 19, 26])
        + at("EST", 1999, 3, [4, 11, 18, 25]),
        forever=True,
    ),
    Example(
        "Every Thursday, but only during June, July, and August, forever",
        d9(1997, 6, 5),
        "FREQ=YEARLY;BYDAY=TH;BYMONTH=6,7,8",
        # ==> (1997 9:00 AM EDT) June 5,12,19,26;July 3,10,17,24,31; August 7,14,21,28
        #     (1998 9:00 AM EDT) June 4,11,18,25;July 2,9,16,23,30; August 6,13,20,27
        #     (1999 9:00 AM EDT) June 3,10,17,24;July 1,8,15,22,29; August 5,12,19,26 ...
        at("EDT", 1997, 6, [5, 12, 19, 26])
        + at("EDT", 1997, 7, [3, 10, 17, 24, 31])
        + at("EDT", 1997, 8, [7, 14, 21, 28])
        + at("EDT", 1998, 6, [4, 11, 18, 25])
        + at("EDT", 1998, 7, [2, 9, 16, 23, 30])
        + at("EDT", 1998, 8, [6, 13, 20, 27])
        + at("EDT", 1999, 6, [3, 10, 17, 24])
        + at("EDT", 1999, 7, [1, 8, 15, 22, 29])
        + at("EDT", 1999, 8, [5, 12, 19, 26]),
        forever=True,
    ),
    Example(
        "Every Friday the 13th, forever",
        d9(1997, 9, 2),
        "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13",
        # EXDATE;TZID=America/New_York:19970902T090000 (in the RFC's example too)
        # ==> (1998 9:00 AM EST) February 13;March 13;November 13
        #     (1999 9:00 AM EDT) August 13
        #     (2000 9:00 AM EDT) October 13 ...
        at("EST", 1998, 2, [13])
        + at("EST", 1998, 3, [13])
        + at("EST", 1998, 11, [13])
        + at("EDT", 1999, 8, [13])
        + at("EDT", 2000, 10, [13]),
        forever=True,
        exdates=(d9(1997, 9, 2),),
    ),
    Example(
        "The first Saturday that follows the first Sunday of the month, forever",
        d9(1997, 9, 13),
        "FREQ=MONTHLY;BYDAY=SA;BYMONTHDAY=7,8,9,10,11,12,13",
        # ==> (1997 9:00 AM EDT) September 13;October 11
        #     (1997 9:00 AM EST) November 8;December 13
        #     (1998 9:00 AM EST) January 10;February 7;March 7
        #     (1998 9:00 AM EDT) April 11;May 9;June 13... ...
        at("EDT", 1997, 9, [13])
        + at("EDT", 1997, 10, [11])
        + at("EST", 1997, 11, [8])
        + at("EST", 1997, 12, [13])
        + at("EST", 1998, 1, [10])
        + at("EST", 1998, 2, [7])
        + at("EST", 1998, 3, [7])
        + at("EDT", 1998, 4, [11])
        + at("EDT", 1998, 5, [9])
        + at("EDT", 1998, 6, [13]),
        forever=True,
    ),
    Example(
        "Every 4 years, the first Tuesday after a Monday in November, forever "
        "(U.S. Presidential Election day)",
        datetime(1996, 11, 5, 9, 0),
        "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8",
        # ==> (1996 9:00 AM EST) November 5 (2000 ...) November 7 (2004 ...) November 2 ...
        at("EST", 1996, 11, [5]) + at("EST", 2000, 11, [7]) + at("EST", 2004, 11, [2]),
        forever=True,
    ),
    Example(
        "The third instance into the month of one of Tuesday, Wednesday, or Thursday, "
        "for the next 3 months",
        d9(1997, 9, 4),
        "FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3",
        # ==> (1997 9:00 AM EDT) September 4;October 7 (1997 9:00 AM EST) November 6
        at("EDT", 1997, 9, [4]) + at("EDT", 1997, 10, [7]) + at("EST", 1997, 11, [6]),
    ),
    Example(
        "The second-to-last weekday of the month",
        d9(1997, 9, 29),
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-2",
        # ==> (1997 9:00 AM EDT) September 29
        #     (1997 9:00 AM EST) October 30;November 27;December 30
        #     (1998 9:00 AM EST) January 29;February 26;March 30 ...
        at("EDT", 1997, 9, [29])
        + at("EST", 1997, 10, [30])
        + at("EST", 1997, 11, [27])
        + at("EST", 1997, 12, [30])
        + at("EST", 1998, 1, [29])
        + at("EST", 1998, 2, [26])
        + at("EST", 1998, 3, [30]),
        forever=True,
    ),
    Example(
        "Every 15 minutes for 6 occurrences",
        d9(1997, 9, 2),
        "FREQ=MINUTELY;INTERVAL=15;COUNT=6",
        # ==> (September 2, 1997 EDT) 09:00,09:15,09:30,09:45,10:00,10:15
        times("EDT", 1997, 9, 2, ["09:00", "09:15", "09:30", "09:45", "10:00", "10:15"]),
        limits=FAST,
    ),
    Example(
        "Every hour and a half for 4 occurrences",
        d9(1997, 9, 2),
        "FREQ=MINUTELY;INTERVAL=90;COUNT=4",
        # ==> (September 2, 1997 EDT) 09:00,10:30;12:00;13:30
        times("EDT", 1997, 9, 2, ["09:00", "10:30", "12:00", "13:30"]),
        limits=FAST,
    ),
    Example(
        "Every 20 minutes from 9:00 AM to 4:40 PM every day (DAILY form)",
        d9(1997, 9, 2),
        "FREQ=DAILY;BYHOUR=9,10,11,12,13,14,15,16;BYMINUTE=0,20,40",
        # ==> (September 2, 1997 EDT) 9:00,9:20,9:40,10:00,10:20, ... 16:00,16:20,16:40
        #     (September 3, 1997 EDT) 9:00,9:20,9:40,10:00,10:20, ...16:00,16:20,16:40 ...
        EVERY_20_MINUTES,
        forever=True,
        limits=FAST,
    ),
    Example(
        "Every 20 minutes from 9:00 AM to 4:40 PM every day (MINUTELY form)",
        d9(1997, 9, 2),
        "FREQ=MINUTELY;INTERVAL=20;BYHOUR=9,10,11,12,13,14,15,16",
        EVERY_20_MINUTES,
        forever=True,
        limits=FAST,
    ),
    Example(
        "An example where the days generated makes a difference because of WKST",
        d9(1997, 8, 5),
        "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO",
        # ==> (1997 EDT) August 5,10,19,24
        at("EDT", 1997, 8, [5, 10, 19, 24]),
    ),
    Example(
        "changing only WKST from MO to SU, yields different results",
        d9(1997, 8, 5),
        "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU",
        # ==> (1997 EDT) August 5,17,19,31
        at("EDT", 1997, 8, [5, 17, 19, 31]),
    ),
    Example(
        "An example where an invalid date (i.e., February 30) is ignored",
        datetime(2007, 1, 15, 9, 0),
        "FREQ=MONTHLY;BYMONTHDAY=15,30;COUNT=5",
        # ==> (2007 EST) January 15,30 (2007 EST) February 15 (2007 EDT) March 15,30
        at("EST", 2007, 1, [15, 30]) + at("EST", 2007, 2, [15]) + at("EDT", 2007, 3, [15, 30]),
    ),
]


def expand(example: Example) -> list[Expected]:
    schedule = compile_schedule(
        example.dtstart, rrule=example.rrule, exdates=example.exdates, limits=example.limits
    )
    occurrences = iter_occurrences(schedule, NY, limits=example.limits)
    if example.forever:
        occurrences = islice(occurrences, len(example.expected))
    found: list[Expected] = []
    for occ in occurrences:
        assert occ.utc is not None
        assert not occ.shifted  # no RFC example touches a DST gap
        assert not occ.skipped
        found.append((occ.utc, occ.local))
    return found


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.title for e in EXAMPLES])
def test_rfc5545_3_8_5_3_example(example: Example) -> None:
    # Both the instant and the wall-clock time the RFC lists (EDT/EST annotation).
    assert expand(example) == example.expected


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.title for e in EXAMPLES])
def test_rfc5545_3_8_5_3_next_occurrence_walks_the_same_list(example: Example) -> None:
    # Re-anchored stepping (what the sender does after each send) gives the RFC's list.
    schedule = compile_schedule(
        example.dtstart, rrule=example.rrule, exdates=example.exdates, limits=example.limits
    )
    walked: list[datetime] = []
    previous = (example.dtstart - timedelta(days=1)).replace(tzinfo=UTC)
    while len(walked) < len(example.expected):
        following = next_occurrence(schedule, NY, previous, limits=example.limits)
        if following is None:
            break
        walked.append(following)
        previous = following
    assert walked == [utc for utc, _ in example.expected]
    if not example.forever:
        assert next_occurrence(schedule, NY, previous, limits=example.limits) is None


def test_every_3_hours_from_9am_to_5pm_on_a_specific_day_follows_until() -> None:
    # RFC 5545 §3.8.5.3, "Every 3 hours from 9:00 AM to 5:00 PM on a specific day":
    #   DTSTART;TZID=America/New_York:19970902T090000
    #   RRULE:FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z
    #   ==> (September 2, 1997 EDT) 09:00,12:00,15:00
    # The listed 15:00 EDT is 19:00Z, after the rule's own UNTIL of 17:00Z (13:00 EDT),
    # and RFC 5545 §3.3.10 says "The UNTIL rule part defines a DATE or DATE-TIME value
    # that bounds the recurrence rule in an inclusive manner". The example contradicts
    # the rule text (a long-known discrepancy, e.g. fmeringdal/rust-rrule#35,
    # python-recurring-ical-events#281); we follow §3.3.10: 09:00 and 12:00 EDT only.
    schedule = compile_schedule(
        d9(1997, 9, 2), rrule="FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z"
    )
    listed = times("EDT", 1997, 9, 2, ["09:00", "12:00", "15:00"])
    until = datetime(1997, 9, 2, 17, 0, tzinfo=UTC)
    assert listed[2][0] > until  # 15:00 EDT = 19:00Z: the RFC's own bound excludes it
    got = [(occ.utc, occ.local) for occ in iter_occurrences(schedule, NY)]
    assert got == listed[:2]


def test_friday_the_13th_without_exdate_still_omits_the_unsynchronized_start() -> None:
    # RFC 5545 §3.8.5.3 "Every Friday the 13th, forever" excludes DTSTART (Tue 2 Sep 1997,
    # not a Friday the 13th) with EXDATE, because §3.3.10 says "The DTSTART property value
    # always counts as the first occurrence" while §3.8.5.1 calls a recurrence set with an
    # unsynchronized DTSTART undefined. The engine's documented choice (recurrence.py,
    # rule 4): a start that does not match the rule is not an occurrence, so even without
    # the EXDATE the list is the RFC's.
    example = next(e for e in EXAMPLES if e.title == "Every Friday the 13th, forever")
    schedule = compile_schedule(example.dtstart, rrule=example.rrule)
    found = islice(iter_occurrences(schedule, NY), len(example.expected))
    assert [(occ.utc, occ.local) for occ in found] == example.expected


def test_rfc5545_3_3_10_multiple_byxxx_evaluation_example() -> None:
    # RFC 5545 §3.3.10, "Here is an example of evaluating multiple BYxxx rule parts":
    #   DTSTART;TZID=America/New_York:19970105T083000
    #   RRULE:FREQ=YEARLY;INTERVAL=2;BYMONTH=1;BYDAY=SU;BYHOUR=8,9;BYMINUTE=30
    # "every Sunday in January at 8:30:00 AM and 9:30:00 AM, every other year".
    # Sundays of January 1997: 5, 12, 19, 26; of January 1999: 3, 10, 17, 24, 31 (EST).
    schedule = compile_schedule(
        datetime(1997, 1, 5, 8, 30),
        rrule="FREQ=YEARLY;INTERVAL=2;BYMONTH=1;BYDAY=SU;BYHOUR=8,9;BYMINUTE=30",
    )
    expected = [
        t
        for year, sundays in ((1997, (5, 12, 19, 26)), (1999, (3, 10, 17, 24, 31)))
        for day in sundays
        for t in times("EST", year, 1, day, ["08:30", "09:30"])
    ]
    found = islice(iter_occurrences(schedule, NY), len(expected))
    assert [(occ.utc, occ.local) for occ in found] == expected


def test_byday_mixing_ordinal_and_plain_weekdays_is_a_union() -> None:
    # RFC 5545 §3.3.10, BYDAY: "Each BYDAY value can also be preceded by a positive (+n) or
    # negative (-n) integer. If present, this indicates the nth occurrence of a specific
    # day within the MONTHLY or YEARLY RRULE ... If an integer modifier is not present, it
    # means all days of this type within the specified frequency." Each value selects
    # days on its own, so FREQ=MONTHLY;BYDAY=MO,-1WE is every Monday plus the last
    # Wednesday of each month. January 2026 starts on a Thursday: Mondays 5, 12, 19, 26;
    # Wednesdays 7, 14, 21, 28, the last being the 28th; February 2026 starts on a Sunday:
    # Mondays 2, 9, 16, 23, last Wednesday the 25th.
    schedule = compile_schedule(d9(2026, 1, 1), rrule="FREQ=MONTHLY;BYDAY=MO,-1WE")
    expected = [d9(2026, 1, d) for d in (5, 12, 19, 26, 28)] + [
        d9(2026, 2, d) for d in (2, 9, 16, 23, 25)
    ]
    found = islice(iter_occurrences(schedule, ZoneInfo("UTC")), len(expected))
    assert [occ.local for occ in found] == expected
