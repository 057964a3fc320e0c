import InMemoryTracing
import NIOConcurrencyHelpers
import RealtimeCore
import Testing
import Tracing

/// The rule a runtime without a tracer of its own follows to find the process's tracer: looked up at
/// most once a second while none is bootstrapped, kept once one is.
@Suite struct TracerLookupCacheTests {
    /// A lookup that answers `tracer()` and counts its calls.
    final class Lookup: Sendable {
        let calls = NIOLockedValueBox(0)
        let answer: NIOLockedValueBox<any Tracer> = NIOLockedValueBox(NoOpTracer())

        func callAsFunction() -> any Tracer {
            calls.withLockedValue { $0 += 1 }
            return answer.withLockedValue { $0 }
        }
    }

    static let second: UInt64 = 1_000_000_000

    @Test("while none is bootstrapped, the answer is believed for a second, then asked again")
    func noneIsRecheckedAfterASecond() {
        let cache = TracerLookupCache()
        let lookup = Lookup()
        let start: UInt64 = 5 * Self.second
        #expect(cache.tracer(now: start, lookup: lookup.callAsFunction) is NoOpTracer)
        #expect(cache.tracer(now: start + Self.second / 2, lookup: lookup.callAsFunction) is NoOpTracer)
        #expect(cache.tracer(now: start + Self.second - 1, lookup: lookup.callAsFunction) is NoOpTracer)
        #expect(lookup.calls.withLockedValue { $0 } == 1, "asked once within the second")
        #expect(cache.tracer(now: start + Self.second, lookup: lookup.callAsFunction) is NoOpTracer)
        #expect(lookup.calls.withLockedValue { $0 } == 2, "asked again once the second has passed")
    }

    @Test("a tracer bootstrapped later is found within a second and kept from then on")
    func aBootstrappedTracerIsFoundAndKept() {
        let cache = TracerLookupCache()
        let lookup = Lookup()
        #expect(cache.tracer(now: 0, lookup: lookup.callAsFunction) is NoOpTracer)
        lookup.answer.withLockedValue { $0 = InMemoryTracer() }
        #expect(cache.tracer(now: Self.second / 2, lookup: lookup.callAsFunction) is NoOpTracer, "still within the second")
        #expect(cache.tracer(now: Self.second, lookup: lookup.callAsFunction) is InMemoryTracer)
        #expect(cache.tracer(now: 100 * Self.second, lookup: lookup.callAsFunction) is InMemoryTracer)
        #expect(lookup.calls.withLockedValue { $0 } == 2, "not asked again once found")
    }
}
