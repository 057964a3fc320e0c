/// Instants of any `Clock<Duration>` as offsets from a fixed start, so a type can keep deadlines
/// without being generic over the clock (the runtime's `any Clock<Duration>`; a manual clock in tests).
package struct ClockTimeline: Sendable {
    private let elapsed: @Sendable () -> Duration
    private let sleepUntil: @Sendable (Duration) async throws -> Void

    package init(clock: some Clock<Duration>) {
        let start = clock.now
        elapsed = { start.duration(to: clock.now) }
        sleepUntil = { offset in try await clock.sleep(until: start.advanced(by: offset), tolerance: nil) }
    }

    /// Time since the timeline was made.
    package var now: Duration { elapsed() }

    /// Sleeps until `offset` from the start; throws when the task is cancelled.
    package func sleep(until offset: Duration) async throws { try await sleepUntil(offset) }
}
