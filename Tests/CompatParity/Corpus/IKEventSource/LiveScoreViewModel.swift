// A main-actor view model over a source: the callbacks come on the main queue, so each one
// enters the main actor with MainActor.assumeIsolated, as a Swift 6 app does with a library whose
// callbacks run on the main queue.
import Foundation
import IKEventSource

struct Score: Decodable, Sendable {
    let home: Int
    let away: Int
}

@MainActor final class LiveScoreViewModel {
    private(set) var score = Score(home: 0, away: 0)
    private(set) var status = "idle"
    private(set) var lastGoal: String?
    private let eventSource: EventSource

    init(matchID: String) {
        eventSource = EventSource(url: URL(string: "https://scores.example.com/matches/\(matchID)/stream")!)

        eventSource.onOpen { [weak self] in
            MainActor.assumeIsolated { self?.status = "live" }
        }
        eventSource.addEventListener("score") { [weak self] _, _, data in
            guard let data = data?.data(using: .utf8), let score = try? JSONDecoder().decode(Score.self, from: data) else { return }
            MainActor.assumeIsolated { self?.score = score }
        }
        eventSource.addEventListener("goal") { [weak self] _, _, data in
            MainActor.assumeIsolated { self?.lastGoal = data }
        }
        eventSource.onComplete { [weak self] statusCode, reconnect, error in
            MainActor.assumeIsolated {
                guard let self else { return }
                self.status = error?.localizedDescription ?? "ended (\(statusCode ?? 0))"
                if reconnect == true || statusCode == 200 { self.eventSource.connect(lastEventId: self.eventSource.lastEventId) }
            }
        }
    }

    func appear() {
        if eventSource.readyState == .closed { eventSource.connect() }
    }

    func disappear() {
        eventSource.disconnect()
    }
}
