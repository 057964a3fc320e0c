/// The EventSource client's part of the demo (filled in with the EventSourceClient module).
enum EventSourceDemo {
    static let steps: [(String, @Sendable () async throws -> Void)] = []
}
